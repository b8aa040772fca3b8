"""Tenant scoping (DESIGN 12): the scope a request acts in, built once from its principal,
and the two checks every route uses: a body may only name the caller's tenant and projects
(403 ``tenant-mismatch`` / ``project-mismatch``), and a resource of another tenant is 404,
answered exactly as an absent one."""

from __future__ import annotations

from litestar import Request
from litestar.datastructures import State

from api.auth_principal import Principal
from ledger.database import Queryable
from ledger.errors import DomainError, NotFound
from projections import queries
from projections.scope import EVERYTHING, Scope

NOT_FOUND = {"task": ("task", "taskId"), "run": ("run", "runId"),
             "session": ("session", "sessionId")}
"""How the 404 of each kind of resource reads: the same words and detail whether it is
absent or another tenant's."""


NOWHERE = Scope(tenant="/none")
"""A scope no row is in (no tenant name may hold ``/``)."""


class TenantMismatch(DomainError):
    """The body names a tenant other than the credential's."""


class ProjectMismatch(DomainError):
    """The body names a project the credential is not scoped to."""


def scope_of(principal: object) -> Scope:
    """The scope of a request's principal (a runner token: none of any tenant's rows; its
    route checks the token against its job instead)."""
    if not isinstance(principal, Principal) or principal.kind == "runner":
        return NOWHERE
    return Scope(principal.tenant, principal.projects)


def provide_caller(request: Request[object, object, State]) -> Scope:
    """The ``caller`` dependency: the scope of the request's principal."""
    return scope_of(request.scope.get("user"))


def check_body(scope: Scope, tenant_id: str, project_id: str) -> None:
    """Refuse a body naming another tenant (403 ``tenant-mismatch``) or a project outside
    the credential's (403 ``project-mismatch``); a ``*`` key may act for any tenant."""
    if not scope.sees(tenant_id):
        raise TenantMismatch(f"the credential acts for tenant {scope.tenant}, not {tenant_id}",
                             tenantId=tenant_id)
    if not scope.sees(tenant_id, project_id):
        raise ProjectMismatch(f"the credential is not scoped to project {project_id}",
                              projectId=project_id)


async def require_visible(db: Queryable, scope: Scope, kind: str, resource_id: str) -> None:
    """Refuse (404, as if absent) a task, run or session that is absent or not in
    ``scope``. Nothing to check for a scope that sees everything."""
    if scope.everything:
        return
    found = await queries.owner(db, kind, resource_id)
    if found is None or not scope.sees(*found):
        noun, field = NOT_FOUND[kind]
        raise NotFound(f"{noun} {resource_id} not found", **{field: resource_id})


__all__ = ["EVERYTHING", "NOWHERE", "ProjectMismatch", "Scope", "TenantMismatch", "check_body",
           "provide_caller", "require_visible", "scope_of"]
