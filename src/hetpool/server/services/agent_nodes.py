"""Which nodes an agent may report for (issue 14, finding 4).

An agent token is a credential left on every host it runs on, so it is the easiest one to
steal. What it may do is therefore bound to its own nodes: a caller that may not write the
inventory (in practice, a user holding only the agent role) registers and heartbeats only

- nodes it created itself through POST /agent/register, or
- nodes an operator assigned to it (`agent: <user>` on the Node spec, applied by a
  platform-admin),

and never an operator's node, another agent's node or a node a connector (Slurm, Ray,
Kubernetes) imports. Ownership is kept twice on purpose: by name in the spec (visible,
exported, diffed and audited like every field) and by user id in
`inventory_objects.agent_user_id`, so a user deleted and re-created under the same name
inherits nothing. Joining an operator's pool needs the pool to name the agent (`agents:`).
A platform-admin is not bound: it may write the inventory anyway.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from hetpool.core.errors import PermissionDeniedError, SpecError
from hetpool.core.inventory import NodeSpec, PoolSpec
from hetpool.governance.access import holds
from hetpool.server.db.models import InventoryObjectRow, NodeStatusRow, UserRow
from hetpool.server.services import access
from hetpool.server.services.auth import Principal, load_bindings

AGENT_SOURCE = "agent"  # NodeStatusRow.source for nodes reported by a host agent


class NodeNotOwnedError(PermissionDeniedError):
    code = "node_not_owned"


class PoolNotOpenError(PermissionDeniedError):
    code = "pool_not_open"


@dataclass(frozen=True)
class Refusal:
    """Why an agent may not report for a node: `owner` is a kind (operator, another
    agent, the <x> connector), never a name or a secret."""

    node: str
    owner: str  # operator | another agent | <source> connector
    how: str  # defined by | reported by | imported by

    def error(self) -> NodeNotOwnedError:
        owner = self.owner if self.owner == "another agent" else f"the {self.owner}" if self.owner.endswith("connector") else f"an {self.owner}"
        return NodeNotOwnedError(
            f"node {self.node!r} is not this agent's: it is {self.how} {owner}. An agent token registers and heartbeats only the nodes "
            "it created or that an operator assigned to it (agent: on the Node); ask a platform-admin to assign it",
            details=[{"loc": "node", "msg": self.node}, {"loc": "owner", "msg": self.owner}],
        )


def is_bound(principal: Principal) -> bool:
    """Bound to its own nodes: whoever may not write the inventory (an agent token)."""
    return not access.allowed(principal, "inventory.write")


def refusal(session: Session, principal: Principal, node: str) -> Refusal | None:
    """None when `principal` may report for `node` (or register it anew), else why not."""
    if not is_bound(principal):
        return None
    status = session.get(NodeStatusRow, node)
    if status is not None and status.source != AGENT_SOURCE:
        return Refusal(node, f"{status.source} connector", "imported by")
    row = session.execute(select(InventoryObjectRow).where(InventoryObjectRow.kind == "Node", InventoryObjectRow.name == node)).scalar_one_or_none()
    if row is None or row.agent_user_id == principal.user_id:
        return None
    if row.agent_user_id is None and not (row.spec or {}).get("agent"):
        return Refusal(node, "operator", "defined by")
    return Refusal(node, "another agent", "reported by")


def claim(principal: Principal, spec: NodeSpec) -> NodeSpec:
    """The spec an agent's registration stores: marked as its own. An agent cannot hand a
    node to someone else (an operator assigns nodes, through apply)."""
    if not is_bound(principal):
        return spec
    if spec.agent not in (None, principal.name):
        raise SpecError(
            f"node.agent: an agent registers nodes for itself ({principal.name!r}), not for {spec.agent!r}",
            details=[{"loc": "node.agent", "msg": f"must be {principal.name!r} or left out"}],
        )
    return spec.model_copy(update={"agent": principal.name})


def check_pool(principal: Principal, pool: PoolSpec, node: str) -> None:
    """An agent adds its node to an operator's pool only when the pool names it in
    `agents`: the pool's stack, price and reservation are the operator's, and which hosts
    share them is the operator's choice too. A node already in the pool stays."""
    if is_bound(principal) and node not in pool.nodes and principal.name not in pool.agents:
        raise PoolNotOpenError(
            f"pool {pool.name!r} does not take nodes from agent {principal.name!r}: its agents list does not name it "
            "(a platform-admin adds it: agents: [...] on the Pool), or register without a pool",
            details=[{"loc": "pool", "msg": pool.name}],
        )


def assigned_agent_ids(session: Session, nodes: list[NodeSpec]) -> tuple[dict[str, int], list[dict[str, str]]]:
    """For the `agent:` names on `nodes`: user ids by name, and problems (unknown users,
    users without the agent role) in apply's {loc, msg} form."""
    names = sorted({n.agent for n in nodes if n.agent})
    if not names:
        return {}, []
    users = {u.name: u for u in session.execute(select(UserRow).where(UserRow.name.in_(names))).scalars()}
    ids, problems = {}, []
    for node in nodes:
        if not node.agent:
            continue
        user = users.get(node.agent)
        if user is None:
            problems.append(
                {"loc": f"Node/{node.name}: agent", "msg": f"no user {node.agent!r}; create it first: hetpool users create {node.agent} --role agent"}
            )
        elif not holds(load_bindings(session, user.id), "agent"):
            problems.append({"loc": f"Node/{node.name}: agent", "msg": f"user {node.agent!r} holds no agent role"})
        else:
            ids[node.agent] = user.id
    return ids, problems
