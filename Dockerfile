# The service image: dependencies are fixed in this layer; runs never install base tools.
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY ledger ledger
COPY projections projections
COPY api api
COPY cli cli
COPY runner_assembly runner_assembly
COPY manifests manifests
RUN pip install --no-cache-dir --prefix=/install .

FROM python:3.11-slim
RUN apt-get update && apt-get install -y --no-install-recommends git bubblewrap passt \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --gid 10001 svc && useradd --uid 10001 --gid svc --home /home/svc svc
COPY --from=build /install /usr/local
USER 10001:10001
ENV SVC_HOST=0.0.0.0 SVC_DATA_DIR=/var/lib/svc
EXPOSE 8080
ENTRYPOINT ["svc"]
CMD ["serve"]
