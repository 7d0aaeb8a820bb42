"""Separation of duties: who may not decide an approval request, whatever their role.

Roles say who may decide a request (services.approvals.check_may_decide); these rules
say who may not, because they are not a second person. A tenant-admin can create users,
grant them roles and issue them tokens within its subtree, so without these rules it can
approve its own request as a user it made (issue 14, finding 3a) — or as any user whose
token it issued. So the rules look at *vouches*: X vouches for Y when X created Y,
granted Y a role binding whose scope covers the request's tenant, or issued an API token
of Y's; each means X could act as Y, or Y's say came from X.

The rules, as small objects like the approval rules (each says why it refuses, or None):

* OwnRequest — nobody decides a request it made. A platform-admin while it is the only
  one is exempt: there is nobody else to ask, and it could change the policy anyway.
* VouchedBetween — for a request of a user below platform-admin, no user below
  platform-admin may control both the requester and the decider, where X controls Y when
  X is Y or a chain of vouches leads from X to Y (A created B, B created C: A controls
  C). This refuses a decider the requester made or was made by, and two puppets of one
  hostile user (siblings, cousins). Chains run through users below platform-admin only
  (a platform-admin's acts are its own). For a platform-admin decider only a direct
  vouch counts, either way: every user descends from some platform-admin, so anything
  more would leave nobody to decide anything.

A request of a platform-admin is subject to OwnRequest only: a platform-admin may issue a
token for anyone, so vouches say nothing about it, and any other platform-admin may
decide it. Pure: the server looks the vouches up.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import deque
from dataclasses import dataclass
from typing import ClassVar

from hetpool.governance.access import covers

CREATED, GRANTED, ISSUED_TOKEN = "created", "granted a role to", "issued a token for"


@dataclass(frozen=True)
class Vouch:
    """`by` vouches for `of` (see the module doc). `scope`: the tenant subtree of a granted
    binding (None for a global one, and for creating a user or issuing a token, which
    count everywhere)."""

    by: str
    how: str
    of: str
    scope: str | None = None

    def reaches(self, tenant: str) -> bool:
        return self.scope is None or covers(self.scope, tenant)

    def __str__(self) -> str:
        where = f" on {self.scope}" if self.how == GRANTED and self.scope else ""
        return f"{self.by} {self.how} {self.of}{where}"


@dataclass(frozen=True)
class DecisionFacts:
    """One decision: who asks, who decides, where, and the vouches and platform-admins
    known to the server."""

    requester: str
    decider: str
    tenant: str
    platform_admins: frozenset[str]
    vouches: tuple[Vouch, ...] = ()

    @property
    def decider_is_platform_admin(self) -> bool:
        return self.decider in self.platform_admins

    @property
    def requester_is_platform_admin(self) -> bool:
        return self.requester in self.platform_admins

    @property
    def sole_platform_admin(self) -> bool:
        return self.platform_admins == frozenset({self.decider})


class DutyRule(ABC):
    name: ClassVar[str]

    @abstractmethod
    def check(self, facts: DecisionFacts) -> str | None:
        """Why the decider may not decide, or None."""


class OwnRequest(DutyRule):
    name: ClassVar[str] = "own_request"

    def check(self, facts: DecisionFacts) -> str | None:
        if facts.decider != facts.requester or facts.sole_platform_admin:
            return None
        return f"nobody decides a request they made: {facts.decider} made it; someone else must decide it"


class VouchedBetween(DutyRule):
    name: ClassVar[str] = "vouched"

    def check(self, facts: DecisionFacts) -> str | None:
        if facts.decider == facts.requester or facts.requester_is_platform_admin:
            return None
        edges = [v for v in facts.vouches if v.reaches(facts.tenant) and v.by != v.of]
        if facts.decider_is_platform_admin:  # a direct vouch only, either way
            path = next(([v] for v in edges if {v.by, v.of} == {facts.decider, facts.requester}), [])
            return _refusal(path, []) if path else None
        up_requester = _controllers(edges, facts.requester, facts.platform_admins)
        up_decider = _controllers(edges, facts.decider, facts.platform_admins)
        common = [u for u in up_requester if u in up_decider]
        if not common:
            return None
        best = min(common, key=lambda u: len(up_requester[u]) + len(up_decider[u]))
        return _refusal(up_requester[best], up_decider[best])


def _refusal(*paths: list[Vouch]) -> str:
    links = "; ".join(", ".join(str(v) for v in path) for path in paths if path)
    return f"nobody decides a request of someone they are linked to by creating a user, granting a role or issuing a token: {links}"


RULES: tuple[DutyRule, ...] = (OwnRequest(), VouchedBetween())


def _controllers(edges: list[Vouch], user: str, platform_admins: frozenset[str]) -> dict[str, list[Vouch]]:
    """Who could act as `user` or made its say: itself, and every user below
    platform-admin with a chain of vouches to it (through such users only), each with its
    shortest chain. Platform-admins are left out: every user descends from one."""
    incoming: dict[str, list[Vouch]] = {}
    for v in edges:
        incoming.setdefault(v.of, []).append(v)
    found: dict[str, list[Vouch]] = {user: []}
    queue = deque([user])
    while queue:
        at = queue.popleft()
        for v in incoming.get(at, ()):
            if v.by in found or v.by in platform_admins:
                continue
            found[v.by] = [v, *found[at]]
            queue.append(v.by)
    return found


@dataclass(frozen=True)
class DutyVerdict:
    rule: str | None = None
    message: str | None = None
    sole_admin_own_request: bool = False

    @property
    def refused(self) -> bool:
        return self.rule is not None


def check_duties(facts: DecisionFacts) -> DutyVerdict:
    """The first rule that refuses, or an allowed verdict (noting the lone-admin exemption,
    which the caller audits)."""
    for rule in RULES:
        message = rule.check(facts)
        if message:
            return DutyVerdict(rule.name, message)
    return DutyVerdict(sole_admin_own_request=facts.decider == facts.requester)
