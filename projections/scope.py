"""What a caller may see (DESIGN 12): its tenant (``*``: every tenant) and, when its key
names some, its projects. The one place that decides whether a row is visible to a caller;
the read queries take its SQL parameters, so lists filter in SQL, never a page after it."""

from __future__ import annotations

from dataclasses import dataclass

ALL_TENANTS = "*"


@dataclass(frozen=True)
class Scope:
    """The tenant and projects a request acts in; built once from its principal."""

    tenant: str
    projects: tuple[str, ...] = ()

    @property
    def everything(self) -> bool:
        """True for an admin of every tenant and project (nothing to filter)."""
        return self.tenant == ALL_TENANTS and not self.projects

    def sees(self, tenant_id: str, project_id: str | None = None) -> bool:
        """True when a row of ``tenant_id`` (and ``project_id``, when the row has one) is
        visible in this scope."""
        if self.tenant != ALL_TENANTS and tenant_id != self.tenant:
            return False
        return not self.projects or project_id is None or project_id in self.projects

    @property
    def tenant_filter(self) -> str | None:
        """The ``tenant_id`` a query keeps (None: every tenant)."""
        return None if self.tenant == ALL_TENANTS else self.tenant

    @property
    def project_filter(self) -> list[str] | None:
        """The ``project_id`` values a query keeps (None: every project)."""
        return list(self.projects) if self.projects else None

    @property
    def cache_key(self) -> tuple[str, tuple[str, ...]]:
        """What tells two scopes' cached answers apart."""
        return self.tenant, self.projects


EVERYTHING = Scope(ALL_TENANTS)
"""The scope of the service's own work and of admin keys of every tenant."""
