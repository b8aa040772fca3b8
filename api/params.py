"""Litestar parameters of the routes: path, query and injected services (the wire modules
stay Litestar-free)."""

from __future__ import annotations

from typing import Annotated

import asyncpg
from litestar import Request
from litestar.datastructures import State
from litestar.di import NamedDependency
from litestar.params import PathParameter, QueryParameter

from api import wire
from api.auth_keys import KeyService
from api.observability import Metrics
from api.runner_service import RunnerApi
from api.services import QueueApi, SessionApi
from ledger.states import SessionFilter, TaskStatus
from projections import queries
from projections.scope import Scope
from runner_assembly.settings import RunnerSettings

HttpRequest = Request[object, object, State]
"""A request as the handlers see it: no user or auth, the app's plain state."""

Limit = Annotated[int, QueryParameter(ge=1, le=500)]
TaskId = Annotated[str, PathParameter(min_length=1, max_length=128,
                                       pattern=wire.IDENTIFIER_PATTERN)]
AttemptId = Annotated[str, PathParameter(min_length=1, max_length=128,
                                          pattern=wire.IDENTIFIER_PATTERN)]
QueueQuery = Annotated[str | None, QueryParameter(name="queue", max_length=128,
                                              pattern=wire.QUEUE_PATTERN)]
ReaderQuery = Annotated[str | None, QueryParameter(name="readerId", max_length=128,
                                              pattern=wire.IDENTIFIER_PATTERN)]
DryRunFlag = Annotated[bool, QueryParameter(name="dryRun")]
Cursor = Annotated[str | None, QueryParameter(max_length=19, pattern=queries.CURSOR_PATTERN)]
TaskStateQuery = Annotated[TaskStatus | None, QueryParameter(name="state")]
UpdatedAfter = Annotated[int | None, QueryParameter(name="updatedAfter", ge=0,
                                                    le=queries.MAX_SEQ)]
CommanderLimit = Annotated[int, QueryParameter(ge=1, le=500)]
RetryCursor = Annotated[int, QueryParameter(ge=0, le=1_000_000)]

SessionId = Annotated[str, PathParameter(min_length=1, max_length=128,
                                         pattern=wire.IDENTIFIER_PATTERN)]
RunId = SessionId
Reader = Annotated[str, QueryParameter(name="readerId", min_length=1, max_length=128,
                                       pattern=wire.IDENTIFIER_PATTERN)]
ProfileQuery = Annotated[str | None, QueryParameter(
    name="backendProfile", pattern=r"^profile-[1-4]$")]
SessionStateQuery = Annotated[SessionFilter, QueryParameter(name="state")]
SessionLimit = Annotated[int, QueryParameter(ge=1, le=500)]
AfterSeq = Annotated[int, QueryParameter(name="afterSeq", ge=0, le=2**62)]
LineLimit = Annotated[int, QueryParameter(ge=1, le=1000)]
KeyId = Annotated[str, PathParameter(min_length=1, max_length=128,
                                     pattern=wire.IDENTIFIER_PATTERN)]

QueueDep = NamedDependency[QueueApi]
SessionDep = NamedDependency[SessionApi]
RunnerDep = NamedDependency[RunnerApi]
PoolDep = NamedDependency[asyncpg.Pool]
MetricsDep = NamedDependency[Metrics]
SettingsDep = NamedDependency[RunnerSettings]
KeysDep = NamedDependency[KeyService]
Caller = NamedDependency[Scope]
"""The tenant and projects the request acts in (``api.scoping``)."""
