"""A Merkle tree over run chain heads, so one run's export proves its place in a checkpoint.

Django-free on purpose: the offline verifier imports it. Leaves and nodes are domain-separated
(0x00 / 0x01 prefixes, as in RFC 6962) so a node can never pass for a leaf. An odd node at the
end of a level is promoted unchanged; the path then has no sibling for that level, which the
verifier derives from (index, size) alone.
"""

import hashlib
import json
from collections.abc import Sequence

EMPTY_ROOT = hashlib.sha256(b"").hexdigest()


def leaf_hash(*, run_id: str, seq: int, head: str) -> bytes:
    """The leaf for one run: its id, the last event seq the checkpoint covers, and that hash."""
    body = json.dumps(
        {"head": head, "run": run_id, "seq": seq}, sort_keys=True, separators=(",", ":")
    ).encode("utf-8")
    return hashlib.sha256(b"\x00" + body).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


def tree_levels(leaves: Sequence[bytes]) -> list[list[bytes]]:
    """Every level, leaves first, root last."""
    levels = [list(leaves)]
    while len(levels[-1]) > 1:
        cur = levels[-1]
        levels.append(
            [
                node_hash(cur[i], cur[i + 1]) if i + 1 < len(cur) else cur[i]
                for i in range(0, len(cur), 2)
            ]
        )
    return levels


def tree_root(levels: list[list[bytes]]) -> str:
    if not levels or not levels[0]:
        return EMPTY_ROOT
    return levels[-1][0].hex()


def inclusion_path(levels: list[list[bytes]], index: int) -> list[bytes]:
    """The siblings from leaf `index` up to the root (promoted levels contribute nothing)."""
    path = []
    for level in levels[:-1]:
        sibling = index ^ 1
        if sibling < len(level):
            path.append(level[sibling])
        index //= 2
    return path


def root_from_path(*, leaf: bytes, index: int, size: int, path: Sequence[bytes]) -> str | None:
    """The root the path leads to, or None when the path does not fit (index, size)."""
    if size < 1 or not 0 <= index < size:
        return None
    node = leaf
    remaining = list(path)
    while size > 1:
        if index % 2 == 1:
            if not remaining:
                return None
            node = node_hash(remaining.pop(0), node)
        elif index + 1 < size:
            if not remaining:
                return None
            node = node_hash(node, remaining.pop(0))
        index //= 2
        size = (size + 1) // 2
    if remaining:
        return None
    return node.hex()
