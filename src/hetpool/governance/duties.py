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
* VouchedBetween — for a request of a user below platform-admin, the decider and the
  requester may not be joined by a chain of vouches, either way. A chain (A created B, B
  created C) counts, since a hostile user can make puppets that make puppets; it runs
  through users below platform-admin only (a platform-admin's acts are its own). For a
  platform-admin decider only a direct vouch counts: every user descends from some
  platform-admin, so a chain would leave nobody to decide anything.

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
        direct_only = facts.decider_is_platform_admin
        for start, goal in ((facts.requester, facts.decider), (facts.decider, facts.requester)):
            path = _chain(edges, start, goal, facts.platform_admins, direct_only=direct_only)
            if path:
                links = ", ".join(str(v) for v in path)
                return f"nobody decides a request of someone they are linked to by creating a user, granting a role or issuing a token: {links}"
        return None


RULES: tuple[DutyRule, ...] = (OwnRequest(), VouchedBetween())


def _chain(edges: list[Vouch], start: str, goal: str, platform_admins: frozenset[str], *, direct_only: bool) -> list[Vouch]:
    """The shortest chain of vouches from `start` to `goal` ([] if none). Only the start
    and users below platform-admin pass a chain on."""
    out: dict[str, list[Vouch]] = {}
    for v in edges:
        out.setdefault(v.by, []).append(v)
    came: dict[str, Vouch | None] = {start: None}
    queue = deque([start])
    while queue:
        user = queue.popleft()
        if user != start and (direct_only or user in platform_admins):
            continue
        for v in out.get(user, ()):
            if v.of in came:
                continue
            came[v.of] = v
            if v.of == goal:
                path, at = [], goal
                while (step := came[at]) is not None:
                    path.append(step)
                    at = step.by
                return path[::-1]
            queue.append(v.of)
    return []


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
