# The service image: dependencies are fixed in this layer; runs never install base tools.
# The base is pinned by digest (python:3.11-slim's image index); refresh it with
# `docker buildx imagetools inspect python:3.11-slim` and pass another with --build-arg.
ARG PYTHON_BASE=python:3.11-slim@sha256:9c900dea9e8fb7e16277c179b555cc72d29a352dbc33cff48ad5a0412fd5bfc7
FROM ${PYTHON_BASE} AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY ledger ledger
COPY projections projections
COPY api api
COPY cli cli
COPY runner_assembly runner_assembly
COPY manifests manifests
RUN pip install --no-cache-dir --prefix=/install .

FROM ${PYTHON_BASE}
RUN apt-get update && apt-get install -y --no-install-recommends git bubblewrap passt \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --gid 10001 svc && useradd --uid 10001 --gid svc --home /home/svc svc
COPY --from=build /install /usr/local
USER 10001:10001
ENV SVC_HOST=0.0.0.0 SVC_DATA_DIR=/var/lib/svc
EXPOSE 8080
ENTRYPOINT ["svc"]
CMD ["serve"]
