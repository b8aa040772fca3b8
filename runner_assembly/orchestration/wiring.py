"""The orchestration services, built once from the pools, the writer, the driver and the
settings, each collaborator made once and handed to those that need it."""

from __future__ import annotations

from dataclasses import dataclass

import asyncpg

from ledger.writer import Writer
from runner_assembly.drivers.protocol import RunnerDriver
from runner_assembly.orchestration.attempt_jobs import AttemptJobs
from runner_assembly.orchestration.dispatch import Dispatcher
from runner_assembly.orchestration.facts import TaskReader
from runner_assembly.orchestration.materialize import JobMaterializer
from runner_assembly.orchestration.planning import JobPlanner, resolver, secret_store
from runner_assembly.orchestration.queue_service import QueueService
from runner_assembly.orchestration.refresh import Refresher
from runner_assembly.orchestration.runner_protocol import RunnerProtocol
from runner_assembly.orchestration.session_commands import SessionCommands
from runner_assembly.orchestration.session_service import SessionService
from runner_assembly.orchestration.session_turns import SessionTurns
from runner_assembly.settings import RunnerSettings


@dataclass(frozen=True)
class Orchestration:
    """The services the API calls: the queue's, the session layer's, the runner protocol."""

    queue: QueueService
    dispatcher: Dispatcher
    refresher: Refresher
    sessions: SessionService
    commands: SessionCommands
    protocol: RunnerProtocol
    turns: SessionTurns
    reader: TaskReader


def orchestration(pool: asyncpg.Pool, fence_pool: asyncpg.Pool, writer: Writer,
                  driver: RunnerDriver, settings: RunnerSettings) -> Orchestration:
    """Every orchestration service on these pools, writer, driver and settings."""
    secrets = secret_store(settings)
    assembly = resolver(settings, secrets)
    planner = JobPlanner(settings, driver.name, secrets, assembly)
    reader = TaskReader(pool, settings.default_profile)
    turns = SessionTurns(pool, fence_pool, writer, driver, settings, assembly)
    protocol = RunnerProtocol(pool, writer, driver, settings.runner_lease_s,
                              settings.runner_start_s, settings.output_max_bytes)
    materializer = JobMaterializer(fence_pool, writer, driver, protocol, turns, settings)
    jobs = AttemptJobs(pool, writer, driver, reader, planner, materializer, turns, protocol)
    dispatcher = Dispatcher(pool, writer, reader, planner, jobs, turns, settings.faults)
    queue = QueueService(pool, writer, reader, planner, dispatcher, jobs)
    refresher = Refresher(writer, reader, protocol, turns)
    sessions = SessionService(pool, writer, driver, reader, turns, protocol)
    commands = SessionCommands(pool, driver, reader, planner, materializer, turns)
    return Orchestration(queue, dispatcher, refresher, sessions, commands, protocol, turns,
                         reader)
