"""The GPU placement algorithm: which node and GPU runs each trainer rank, engine and judge.

Single node when everything fits one replica; otherwise whole trainer nodes, then engines
on the free GPUs of the last trainer node, then engine-only nodes, then judges (sorted by
name) on the last non-trainer node with room or on their own node. See DESIGN.md section 4
and the reference notes section 4.8. It never fails: impossible layouts still produce a
plan, and the rules (schemas/rules/placement.rules) report what is wrong with it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

ENGINE_PORT = 30000
ROUTER_PORT = 29000
JUDGE_PORT = 31000
TEACHER_PORT = 32000


@dataclass(frozen=True)
class PlacementInput:
    trainer_nodes: int
    trainer_gpus: int  # per node; 0 = CPU
    cpu_processes: int
    inference_gpus: int
    tensor_parallel: int
    num_engines: int
    colocated: bool
    router: bool
    judges: tuple[tuple[str, int], ...]  # bound managed judges (name, gpus)
    gpus_per_replica: int | None  # explicit launch.gpus_per_replica
    engine_nodes: int = 0  # CPU runs: nodes that run only engines (inference.nodes)
    teacher_gpus: int | None = None  # on-policy distillation teacher (0: on the CPU)


class _Node:
    def __init__(self, index: int):
        self.index = index
        self.gpus: dict[int, list[str]] = {}
        self.cpu_roles: list[str] = []
        self.width = 0  # GPUs in use (highest index + 1)

    def take(self, count: int, role: str, start: int | None = None) -> list[int]:
        first = self.width if start is None else start
        ids = list(range(first, first + count))
        for g in ids:
            self.gpus.setdefault(g, []).append(role)
        self.width = max(self.width, first + count)
        return ids

    def to_json(self) -> dict[str, Any]:
        return {
            "node": self.index,
            "gpus": [{"gpu": g, "roles": roles} for g, roles in sorted(self.gpus.items())],
            "cpu_roles": list(self.cpu_roles),
        }


def place(p: PlacementInput) -> dict[str, Any]:
    tp = max(p.tensor_parallel, 1)
    world_gpus = p.trainer_nodes * p.trainer_gpus
    judge_gpus = sum(g for _, g in p.judges)
    teacher_gpus = p.teacher_gpus or 0
    nodes: list[_Node] = []
    engines: list[dict[str, Any]] = []
    judges: list[dict[str, Any]] = []

    def node(i: int) -> _Node:
        while len(nodes) <= i:
            nodes.append(_Node(len(nodes)))
        return nodes[i]

    cpu_run = p.trainer_gpus == 0 and p.inference_gpus == 0
    if p.trainer_gpus == 0:
        for n in range(p.trainer_nodes):
            for i in range(p.cpu_processes):
                node(n).cpu_roles.append(f"trainer:{n * p.cpu_processes + i}")
        trainer_world = p.trainer_nodes * p.cpu_processes
    else:
        trainer_world = world_gpus
    policy = world_gpus + (0 if p.colocated else p.inference_gpus)
    total = policy + judge_gpus + teacher_gpus
    teacher: dict[str, Any] | None = None

    if cpu_run:
        capacity = 0
        node(max(p.trainer_nodes - 1, 0))
        for e in range(p.num_engines):
            # engine-only nodes follow the trainer nodes, engines spread round robin
            n = p.trainer_nodes + e % p.engine_nodes if p.engine_nodes else 0
            node(n).cpu_roles.append(f"engine:{e}")
            engines.append(
                {"id": e, "node": n, "gpus": [], "device": "cpu", "port": ENGINE_PORT + e}
            )
    else:
        capacity = p.gpus_per_replica or (8 if p.trainer_nodes > 1 or total > 8 else max(total, 1))
        single = p.trainer_nodes == 1 and total <= capacity
        per_node = max(tp, (capacity // tp) * tp)
        for n in range(p.trainer_nodes):
            node(n)
            if p.trainer_gpus:
                for i in range(p.trainer_gpus):
                    node(n).take(1, f"trainer:{n * p.trainer_gpus + i}", start=i)
        eng = 0
        if p.colocated:
            # engines share the trainer GPUs, in rank order across trainer nodes
            slots = [(n, g) for n in range(p.trainer_nodes) for g in range(max(p.trainer_gpus, 1))]
            for e in range(p.num_engines):
                first = e * tp
                n, g = slots[first] if first < len(slots) else (0, first)
                ids = node(n).take(tp, f"engine:{e}", start=g)
                engines.append(
                    {"id": e, "node": n, "gpus": ids, "device": "cuda", "port": ENGINE_PORT + e}
                )
        else:
            last = nodes[-1]
            remaining = p.num_engines
            free = (capacity - last.width) if not single else capacity - last.width
            while remaining and free >= tp:
                ids = last.take(tp, f"engine:{eng}")
                engines.append(
                    {
                        "id": eng,
                        "node": last.index,
                        "gpus": ids,
                        "device": "cuda",
                        "port": ENGINE_PORT + eng,
                    }
                )
                eng += 1
                remaining -= 1
                free -= tp
            while remaining:
                fresh = node(len(nodes))
                fit = max(per_node // tp, 1)
                for _ in range(min(fit, remaining)):
                    ids = fresh.take(tp, f"engine:{eng}")
                    engines.append(
                        {
                            "id": eng,
                            "node": fresh.index,
                            "gpus": ids,
                            "device": "cuda",
                            "port": ENGINE_PORT + eng,
                        }
                    )
                    eng += 1
                    remaining -= 1
        if teacher_gpus:  # like a judge: beside the engines, or on a node of its own
            last = nodes[-1]
            on_trainer = last.index < p.trainer_nodes and not single
            fits = capacity - last.width >= teacher_gpus
            target = last if single or (not on_trainer and fits) else node(len(nodes))
            ids = target.take(teacher_gpus, "teacher")
            teacher = {"node": target.index, "gpus": ids, "device": "cuda", "port": TEACHER_PORT}
        for j, (name, gpus) in enumerate(sorted(p.judges)):
            last = nodes[-1]
            on_trainer = last.index < p.trainer_nodes and not single
            if single or (not on_trainer and capacity - last.width >= gpus):
                target = last
            else:
                target = node(len(nodes))
            ids = target.take(gpus, f"judge:{name}")
            judges.append({"name": name, "node": target.index, "gpus": ids, "port": JUDGE_PORT + j})

    if p.teacher_gpus == 0:  # served on the CPU of the first node
        node(0).cpu_roles.append("teacher")
        teacher = {"node": 0, "gpus": [], "device": "cpu", "port": TEACHER_PORT}
    router = None
    if p.router and engines:
        router = {"node": 0, "port": ROUTER_PORT}
        node(0).cpu_roles.insert(0, "router")
    replicas = max(len(nodes), 1)
    used = sum(n.width for n in nodes)
    gpus_per_replica = capacity if not cpu_run else 0
    if not cpu_run and replicas == 1 and p.gpus_per_replica is None:
        gpus_per_replica = max(nodes[0].width if nodes else 1, 1)
    allocated = gpus_per_replica * replicas
    return {
        "nodes": [n.to_json() for n in nodes] or [_Node(0).to_json()],
        "engines": engines,
        "router": router,
        "judges": judges,
        "teacher": teacher,
        "teacher_gpus": teacher_gpus,
        "trainer": {
            "nodes": list(range(p.trainer_nodes)),
            "gpus_per_node": p.trainer_gpus,
            "world_size": trainer_world,
            "device": "cuda" if p.trainer_gpus else "cpu",
        },
        "replicas": replicas,
        "gpus_per_replica": gpus_per_replica,
        "allocated_gpus": allocated,
        "used_gpus": used,
        "policy_gpus": policy,
        "judge_gpus": judge_gpus,
        "unused_gpus": max(allocated - used, 0),
        "widest_node": max((n.width for n in nodes), default=0),
    }
