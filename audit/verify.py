"""Offline verification of a JSONL export: no Django, no database, only the file and a public key.

Runnable as `python -m audit.verify FILE --public-key KEY` on a machine with nothing but Python
and `cryptography`, and behind `manage.py verify_export`. What it proves (EXPORT_FORMAT.md):

1. every line is where the export put it: each line names its position `n` and the sha256 of the
   line before it, and the signed trailer names the last line's hash and the line count, so a
   deleted, duplicated, reordered or edited line is found (and named);
2. every run's events form an unbroken hash chain (seq gapless from 1, prev_hash, hash recomputed
   over the canonical event body) ending at the run's recorded head;
3. every run's steps are what its events say they are (runs.binding: state, arguments,
   result, usage, resolution, each bound by a hash in an event), so a step row edited in the
   database before the export is named;
4. every run's chain head at checkpoint time is a leaf of a signed checkpoint (Merkle path), and
   the checkpoints form a chain (each names the previous one's hash), each signed by the key.
"""

import argparse
import base64
import binascii
import hashlib
import json
import re
import sys
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from audit.merkle import leaf_hash, root_from_path
from runs.binding import StepReplay
from runs.canonical import GENESIS_HASH, canonical_json, event_body, event_hash

FORMAT = "intentledger.export"
VERSION = 1
# What an auditor copies out of the checkout to verify on a machine with nothing but Python 3.12+
# and `pip install cryptography` (folders kept): `python -m audit.verify FILE --public-key KEY`
OFFLINE_FILES = (
    "audit/__init__.py",
    "audit/verify.py",
    "audit/merkle.py",
    "audit/evidence_verify.py",
    "runs/__init__.py",
    "runs/binding.py",
    "runs/canonical.py",
    "runs/vocabulary.py",
)
_RUN_ID = re.compile(rb'"id":"([0-9a-f-]{36})"')


@dataclass(frozen=True)
class Problem:
    line: int
    message: str
    run: str | None = None
    event: int | None = None

    def __str__(self) -> str:
        where = f"line {self.line}"
        if self.run:
            where += f" run {self.run}"
        if self.event is not None:
            where += f" event {self.event}"
        return f"BROKEN {where}: {self.message}"


@dataclass
class Report:
    problems: list[Problem] = field(default_factory=list)
    runs: int = 0
    events: int = 0
    checkpoints: int = 0
    runs_covered: int = 0
    events_uncovered: int = 0
    signed_manifest: bool = False

    @property
    def ok(self) -> bool:
        return not self.problems and self.signed_manifest

    def add(
        self, line: int, message: str, run: str | None = None, event: int | None = None
    ) -> None:
        self.problems.append(Problem(line, message, run, event))


def load_public_key(value: str) -> Ed25519PublicKey:
    """A raw 32-byte key in base64, a PEM public key, or the path of a file holding either."""
    text = value.strip()
    if not text.startswith("-----") and len(text) != 44 and Path(text).is_file():
        text = Path(text).read_text().strip()
    if text.startswith("-----BEGIN"):
        key = serialization.load_pem_public_key(text.encode("ascii"))
        if not isinstance(key, Ed25519PublicKey):
            raise ValueError("the PEM key is not an Ed25519 public key")
        return key
    return Ed25519PublicKey.from_public_bytes(
        raw_key_bytes(text, "the public key (or the file it names)")
    )


def raw_key_bytes(text: str, what: str) -> bytes:
    """The 32 raw bytes of an Ed25519 key written as base64; ValueError saying what is wrong."""
    try:
        raw = base64.b64decode(text, validate=True)
    except binascii.Error as exc:
        raise ValueError(f"{what} is neither base64 nor PEM") from exc
    if len(raw) != 32:
        raise ValueError(f"{what} must hold the 32 bytes of an Ed25519 key, not {len(raw)}")
    return raw


def key_id(public_key: Ed25519PublicKey) -> str:
    raw = public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()[:16]


def _signature_ok(public_key: Ed25519PublicKey, signature: Any, message: Any) -> bool:
    try:
        public_key.verify(base64.b64decode(str(signature), validate=True), canonical_json(message))
    except (InvalidSignature, binascii.Error, ValueError, TypeError):
        return False
    return True


def _lines(path: Path) -> Iterator[tuple[int, bytes]]:
    with path.open("rb") as handle:
        for number, raw in enumerate(handle, start=1):
            yield number, raw.rstrip(b"\n")


class _Verifier:
    def __init__(self, public_keys: list[Ed25519PublicKey]) -> None:
        self.keys = {key_id(k): k for k in public_keys}
        self.report = Report()
        self.prev_line_hash = GENESIS_HASH
        self.expected_n = 1
        self.checkpoints: dict[int, dict[str, Any]] = {}
        self.last_checkpoint: dict[str, Any] | None = None
        self.trailer: dict[str, Any] | None = None
        self.header_seen = False
        self.prev_run: str | None = None
        self.trailer_line = 0

    def line(self, number: int, raw: bytes) -> None:
        report = self.report
        if self.trailer is not None:
            report.add(number, "a line after the signed trailer")
            return
        try:
            obj = json.loads(raw)
            if not isinstance(obj, dict):
                raise ValueError("not an object")
        except ValueError:
            found = _RUN_ID.search(raw)
            report.add(
                number,
                "not a valid JSON object (edited or truncated)",
                run=found.group(1).decode() if found else None,
            )
            self.prev_line_hash = hashlib.sha256(raw).hexdigest()
            self.prev_run = found.group(1).decode() if found else None
            self.expected_n += 1
            return
        kind = obj.get("kind")
        if kind == "trailer":
            self.trailer = obj
            self.trailer_line = number
            return
        run_id = obj.get("run", {}).get("id") if kind == "run" else None
        if obj.get("n") != self.expected_n:
            report.add(
                number,
                f"line position n={obj.get('n')} where {self.expected_n} was expected "
                "(a line was deleted, duplicated or moved)",
                run=run_id,
            )
        elif obj.get("prev") != self.prev_line_hash:
            report.add(
                number - 1,
                f"line {number - 1} was edited: its sha256 is not the one line {number} recorded",
                run=self.prev_run,
            )
        if isinstance(obj.get("n"), int):
            self.expected_n = obj["n"]
        self.expected_n += 1
        self.prev_line_hash = hashlib.sha256(raw).hexdigest()
        self.prev_run = run_id
        if kind == "header":
            self.header(number, obj)
        elif kind == "checkpoint":
            self.checkpoint(number, obj)
        elif kind == "run":
            self.run(number, obj)
        else:
            report.add(number, f"unknown line kind {kind!r}")

    def signed(self, signature: Any, message: dict[str, Any]) -> bool:
        """Verified with the key the message names (keys rotate: old checkpoints keep theirs)."""
        key = self.keys.get(str(message.get("key_id")))
        return key is not None and _signature_ok(key, signature, message)

    def header(self, number: int, obj: dict[str, Any]) -> None:
        self.header_seen = True
        if obj.get("format") != FORMAT or obj.get("version") != VERSION:
            self.report.add(number, f"not an {FORMAT} v{VERSION} export")

    def checkpoint(self, number: int, obj: dict[str, Any]) -> None:
        report = self.report
        statement = obj.get("statement") or {}
        seq = statement.get("seq")
        report.checkpoints += 1
        digest = hashlib.sha256(canonical_json(statement)).hexdigest()
        if digest != obj.get("hash"):
            report.add(number, f"checkpoint {seq}: hash does not match its statement")
        if not self.signed(obj.get("signature"), statement):
            report.add(
                number,
                f"checkpoint {seq}: signature does not verify with the given key(s) "
                f"(signed by key id {statement.get('key_id')})",
            )
        last = self.last_checkpoint
        if last is not None:
            if seq != last["statement"]["seq"] + 1:
                report.add(number, f"checkpoint {seq} follows {last['statement']['seq']}")
            if statement.get("prev") != last["hash"]:
                report.add(number, f"checkpoint {seq} does not name the previous checkpoint")
        elif seq == 1 and statement.get("prev") != GENESIS_HASH:
            report.add(number, "checkpoint 1 must start the chain")
        self.last_checkpoint = {"statement": statement, "hash": digest}
        if isinstance(seq, int):
            self.checkpoints[seq] = statement

    def run(self, number: int, obj: dict[str, Any]) -> None:
        report = self.report
        run = obj.get("run") or {}
        run_id = str(run.get("id"))
        events = obj.get("events") or []
        report.runs += 1
        report.events += len(events)
        prev = GENESIS_HASH
        expected_seq = 1
        hashes: dict[int, str] = {}
        replay = StepReplay()
        for event in events:
            seq = event.get("seq") if isinstance(event, dict) else None
            if not isinstance(seq, int):
                report.add(number, "an event without a seq", run=run_id)
                continue
            if seq != expected_seq:
                report.add(
                    number,
                    f"seq {seq} where {expected_seq} was expected (events deleted or reordered)",
                    run=run_id,
                    event=seq,
                )
                expected_seq = seq
            if event.get("prev_hash") != prev:
                report.add(
                    number, "prev_hash does not name the previous event", run=run_id, event=seq
                )
            try:
                digest = event_hash(
                    prev_hash=str(event.get("prev_hash")),
                    body=event_body(
                        run_id=run_id,
                        **{k: event.get(k) for k in ("seq", "type", "payload", "actor", "at")},
                    ),
                )
            except (ValueError, UnicodeEncodeError):
                digest = ""
            if digest != event.get("hash"):
                report.add(number, "hash does not match the event's content", run=run_id, event=seq)
            replay.feed(
                seq=seq,
                type=str(event.get("type")),
                payload=event.get("payload"),
                at=event.get("at"),
            )
            prev = str(event.get("hash"))
            hashes[seq] = prev
            expected_seq += 1
        steps = obj.get("steps")
        for seq, problem in replay.mismatches(steps if isinstance(steps, list) else []):
            report.add(number, problem, run=run_id, event=seq or None)
        chain = obj.get("chain") or {}
        if chain.get("seq") != expected_seq - 1 or chain.get("head") != prev:
            report.add(
                number,
                f"the run's chain head (seq {chain.get('seq')}) does not match its last event "
                f"(seq {expected_seq - 1}): events missing at the end",
                run=run_id,
                event=expected_seq - 1,
            )
        self.coverage(number, run_id, obj.get("checkpoint"), hashes, chain)

    def coverage(
        self,
        number: int,
        run_id: str,
        proof: Any,
        hashes: dict[int, str],
        chain: dict[str, Any],
    ) -> None:
        report = self.report
        seq = chain.get("seq")
        total: int = seq if isinstance(seq, int) else len(hashes)
        if proof is None:
            report.events_uncovered += total
            return
        statement = self.checkpoints.get(proof.get("seq"))
        if statement is None:
            report.add(
                number, f"names checkpoint {proof.get('seq')}, absent from the export", run=run_id
            )
            return
        covered = proof.get("event_seq")
        head = hashes.get(covered) if isinstance(covered, int) else None
        if head is None:
            report.add(
                number,
                f"checkpoint {proof.get('seq')} covers event {covered}, absent from the run",
                run=run_id,
                event=covered,
            )
            return
        try:
            path = [bytes.fromhex(h) for h in proof.get("path") or []]
        except (ValueError, TypeError):
            path = []
        root = root_from_path(
            leaf=leaf_hash(run_id=run_id, seq=covered, head=head),
            index=proof.get("index", -1),
            size=statement.get("leaves", 0),
            path=path,
        )
        if root != statement.get("root"):
            report.add(
                number,
                f"the chain up to event {covered} is not the one signed in checkpoint "
                f"{proof.get('seq')} (an event up to {covered} was changed)",
                run=run_id,
                event=covered,
            )
            return
        report.runs_covered += 1
        report.events_uncovered += max(0, total - covered)

    def finish(self) -> Report:
        report = self.report
        if not self.header_seen:
            report.add(1, "no header line")
        trailer = self.trailer
        if trailer is None:
            report.add(self.expected_n, "no signed trailer: the export is truncated")
            return report
        manifest = trailer.get("manifest") or {}
        line = self.trailer_line
        if not self.signed(trailer.get("signature"), manifest):
            report.add(
                line,
                "the trailer's signature does not verify with the given key(s) "
                f"(signed by key id {manifest.get('key_id')})",
            )
            return report
        report.signed_manifest = True
        if manifest.get("lines") != self.expected_n - 1:
            report.add(
                line,
                f"the signed trailer counts {manifest.get('lines')} lines, "
                f"the file has {self.expected_n - 1}",
            )
        if manifest.get("last_line_hash") != self.prev_line_hash:
            report.add(
                line - 1,
                f"line {line - 1} was edited, or lines were cut off after it: it is not the "
                "last line the trailer signed",
                run=self.prev_run,
            )
        if manifest.get("runs") != report.runs:
            report.add(
                line, f"the signed trailer counts {manifest.get('runs')} runs, found {report.runs}"
            )
        return report


def verify_export_file(
    path: Path | str, public_key: Ed25519PublicKey | list[Ed25519PublicKey]
) -> Report:
    """Verify one export; give every public key its checkpoints may have been signed with."""
    verifier = _Verifier(public_key if isinstance(public_key, list) else [public_key])
    for number, raw in _lines(Path(path)):
        verifier.line(number, raw)
    return verifier.finish()


def render_report(report: Report, *, max_problems: int = 200) -> list[str]:
    lines = [str(p) for p in report.problems[:max_problems]]
    if len(report.problems) > max_problems:
        lines.append(f"... and {len(report.problems) - max_problems} more")
    lines.append(
        f"checked {report.runs} runs, {report.events} events, {report.checkpoints} checkpoints; "
        f"{report.runs_covered} runs covered by a signed checkpoint, "
        f"{report.events_uncovered} events newer than the last checkpoint"
    )
    lines.append("OK" if report.ok else f"FAILED: {len(report.problems)} problems")
    return lines


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The verifier's arguments, for this script and `manage.py verify_export` alike."""
    parser.add_argument("file", help="the .jsonl export, or an evidence pack (.zip)")
    parser.add_argument(
        "--public-key",
        action="append",
        default=[],
        help="the signing public key: base64 (32 raw bytes), PEM, or a file holding either; "
        "repeat it when the checkpoints span a key rotation. Required for a JSONL export; for "
        "an evidence pack the signature must then be this key's (without it, the pack's own "
        "key is used and its fingerprint printed)",
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m audit.verify",
        description="Verify an Agent Ledger JSONL export or evidence pack offline (no "
        "database, no settings). Exit 0 when it verifies, 1 when something is broken, 2 when "
        "the file or key cannot be read.",
    )
    add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        public_key = [load_public_key(k) for k in args.public_key]
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    path = Path(args.file)
    if not path.is_file():
        print(f"error: no file {path}", file=sys.stderr)
        return 2
    if zipfile.is_zipfile(path):
        from audit.evidence_verify import render_pack_report, verify_pack

        pack = verify_pack(str(path), public_key or None)
        for line in render_pack_report(pack):
            print(line)
        return 0 if pack.ok else 1
    if not public_key:
        print("error: a JSONL export needs --public-key", file=sys.stderr)
        return 2
    report = verify_export_file(path, public_key)
    for line in render_report(report):
        print(line)
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
