"""The evidence pack's format and its offline verification: no Django, no database.

A pack is one ZIP (audit/EVIDENCE_FORMAT.md, and the README.md inside every pack). Its root is
`manifest.json`: `{"manifest": {...}, "signature": base64 Ed25519 over the manifest's canonical
JSON}`, the manifest naming every other file with its SHA-256 and size. `runs.jsonl` is a JSONL
export (audit/EXPORT_FORMAT.md: the runs, their events, hash chains and the signed checkpoints
over them, with its own signed trailer); `decisions.csv` is derived from the runs' events by
`decision_rows`, here, so the builder and the verifier use one rule.

`python -m audit.verify PACK.zip [--public-key KEY]` checks, and names the first file, run or
row that does not match:

1. the manifest's signature (with `--public-key`, by that key; without it, by the pack's own
   `public-key.txt`, whose fingerprint is printed to compare with the ledger's pages);
2. every file's SHA-256 and size against the manifest, and no file missing or added;
3. `runs.jsonl`: every line, run, event chain, step binding, checkpoint signature and Merkle path
   (audit.verify's export verifier);
4. `decisions.csv`: row by row, the decisions the verified events of `runs.jsonl` record.

Kept to Python 3.11's syntax: the offline machine's Python may be older than the server's.
"""

import csv
import hashlib
import io
import json
import zipfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import IO, Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from runs.vocabulary import EventType

PACK_FORMAT = "intentledger.evidence"
PACK_VERSION = 1
MANIFEST = "manifest.json"
PUBLIC_KEY = "public-key.txt"
RUNS = "runs.jsonl"
DECISIONS = "decisions.csv"
# the columns the verifier recomputes from the runs' verified events; `role` and
# `approval_rule` come from the ledger's records (the audit log, the rules), bound by the
# manifest's hash and signature only
DECISION_COLUMNS = (
    "at",
    "by",
    "role",
    "run_id",
    "step_index",
    "tool",
    "action",
    "note",
    "approval_rule_id",
    "approval_rule",
    "event_seq",
)
DERIVED_COLUMNS = (
    "at",
    "by",
    "run_id",
    "step_index",
    "tool",
    "action",
    "note",
    "approval_rule_id",
    "event_seq",
)
# the event types that may record a person's decision on a step (a cheap pre-filter on raw lines)
DECISION_MARKERS = (
    b'"' + EventType.STEP_RESOLVED.encode() + b'"',
    b'"' + EventType.APPROVAL_GIVEN.encode() + b'"',
    b'"' + EventType.STEP_DENIED.encode() + b'"',
)
CHUNK = 1 << 20
# text a spreadsheet would run as a formula gets a leading quote (OWASP CSV injection), in every
# CSV of the pack; decisions.csv is compared after the same treatment
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def csv_text(value: object) -> str:
    text = "" if value is None else str(value)
    return "'" + text if text.startswith(_FORMULA_START) else text


def key_fingerprint(public_key: Ed25519PublicKey) -> str:
    """SHA-256 of the key's 32 raw bytes, hex; its first 16 characters are the key id."""
    raw = public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()


def decision_rows(run: dict[str, Any]) -> list[dict[str, str]]:
    """Every decision a person took on one of the run's steps, in event order, as recorded in
    its chain: a resolution of an unknown step (sent, retry, abandon), an approval, a denial.
    Decisions taken by the system (a tool's lookup, an approval's expiry) are not people's."""
    run_id = str((run.get("run") or {}).get("id"))
    tools = {
        s.get("index"): str(s.get("name")) for s in run.get("steps") or [] if isinstance(s, dict)
    }
    rule_of: dict[Any, str] = {}
    rows = []
    for event in run.get("events") or []:
        if not isinstance(event, dict):
            continue
        kind = event.get("type")
        raw_payload = event.get("payload")
        payload: dict[str, Any] = raw_payload if isinstance(raw_payload, dict) else {}
        index = payload.get("index")
        if kind == EventType.APPROVAL_REQUESTED:
            rule = payload.get("rule")
            rule_of[index] = "" if rule is None else str(rule)
            continue
        if kind == EventType.STEP_RESOLVED:
            action = str(payload.get("action"))
        elif kind == EventType.APPROVAL_GIVEN:
            action = "approve"
        elif kind == EventType.STEP_DENIED and not payload.get("expired"):
            action = "deny"
        else:
            continue
        by = str(payload.get("by") or "")
        if by.startswith("system:"):
            continue
        rows.append(
            {
                "at": str(event.get("at")),
                "by": by,
                "run_id": run_id,
                "step_index": str(index),
                "tool": tools.get(index, ""),
                "action": action,
                "note": str(payload.get("note") or ""),
                "approval_rule_id": rule_of.get(index, "")
                if kind != EventType.STEP_RESOLVED
                else "",
                "event_seq": str(event.get("seq")),
            }
        )
    return rows


@dataclass(frozen=True)
class PackProblem:
    file: str
    message: str
    where: str = ""

    def __str__(self) -> str:
        where = f" {self.where}" if self.where else ""
        return f"BROKEN {self.file}{where}: {self.message}"


@dataclass
class PackReport:
    problems: list[PackProblem] = field(default_factory=list)
    fingerprint: str = ""
    key_id: str = ""
    key_source: str = ""
    files: int = 0
    runs: int = 0
    events: int = 0
    checkpoints: int = 0
    decisions: int = 0
    signed: bool = False
    manifest: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.signed and not self.problems

    def add(self, file: str, message: str, where: str = "") -> None:
        self.problems.append(PackProblem(file, message, where))


def _hash_member(pack: zipfile.ZipFile, name: str) -> tuple[str, int]:
    digest = hashlib.sha256()
    size = 0
    with pack.open(name) as handle:
        while chunk := handle.read(CHUNK):
            digest.update(chunk)
            size += len(chunk)
    return digest.hexdigest(), size


def _member_lines(handle: IO[bytes]) -> Iterator[tuple[int, bytes]]:
    for number, raw in enumerate(handle, start=1):
        yield number, raw.rstrip(b"\n")


def _signature_ok(key: Ed25519PublicKey, signature: Any, message: Any) -> bool:
    from audit.verify import _signature_ok as check

    return check(key, signature, message)


def verify_pack(path: str, public_keys: list[Ed25519PublicKey] | None = None) -> PackReport:
    """Verify an evidence pack; `public_keys` given: the manifest must be signed by one of them."""
    from audit.verify import Report, _Verifier, key_id, load_public_key

    report = PackReport()
    try:
        pack = zipfile.ZipFile(path)
    except (OSError, zipfile.BadZipFile) as exc:
        report.add(str(path), f"not a readable ZIP file ({exc})")
        return report
    with pack:
        names = pack.namelist()
        if MANIFEST not in names:
            report.add(MANIFEST, "missing: this is not an evidence pack")
            return report
        try:
            body = json.loads(pack.read(MANIFEST))
            manifest = body["manifest"]
            signature = body["signature"]
            if not isinstance(manifest, dict):
                raise TypeError("not an object")
        except (ValueError, KeyError, TypeError, zipfile.BadZipFile) as exc:
            report.add(MANIFEST, f"not a signed manifest (edited or truncated: {exc})")
            return report
        report.manifest = manifest
        listed = {str(f.get("path")): f for f in manifest.get("files") or [] if isinstance(f, dict)}

        # the key: the one given, or the pack's own
        own_key: Ed25519PublicKey | None = None
        try:
            own_key = load_public_key(pack.read(PUBLIC_KEY).decode("ascii"))
        except (KeyError, ValueError, UnicodeDecodeError, zipfile.BadZipFile):
            own_key = None
        if public_keys:
            keys = public_keys
            report.key_source = "the key given (--public-key)"
        elif own_key is not None:
            keys = [own_key]
            report.key_source = f"the pack's own {PUBLIC_KEY}"
        else:
            report.add(PUBLIC_KEY, "missing or not an Ed25519 public key, and no --public-key")
            return report
        by_id = {key_id(k): k for k in keys}
        signer = by_id.get(str(manifest.get("key_id")))
        if signer is not None:
            report.fingerprint = key_fingerprint(signer)
            report.key_id = key_id(signer)
        else:
            report.fingerprint = key_fingerprint(keys[0])
            report.key_id = key_id(keys[0])
        if manifest.get("format") != PACK_FORMAT or manifest.get("version") != PACK_VERSION:
            report.add(MANIFEST, f"not an {PACK_FORMAT} v{PACK_VERSION} manifest")
        if signer is not None and _signature_ok(signer, signature, manifest):
            report.signed = True
        else:
            if not public_keys and PUBLIC_KEY in listed:
                digest, _ = _hash_member(pack, PUBLIC_KEY)
                if digest != listed[PUBLIC_KEY].get("sha256"):
                    report.add(PUBLIC_KEY, "changed: its SHA-256 is not the one the manifest lists")
            if signer is None:
                report.add(
                    MANIFEST,
                    f"signed by key id {manifest.get('key_id')}, not by "
                    f"{', '.join(sorted(by_id))} ({report.key_source})",
                )
            else:
                report.add(
                    MANIFEST,
                    "the signature does not verify: the manifest (a file's hash, a count, the "
                    "period) or its signature was changed after signing",
                )

        # every file against the manifest
        for name in names:
            if name not in listed and name != MANIFEST:
                report.add(name, "not listed in the manifest (added to the pack)")
        for name, entry in listed.items():
            if name not in names:
                report.add(name, "listed in the manifest but missing from the pack")
                continue
            try:
                digest, size = _hash_member(pack, name)
            except (zipfile.BadZipFile, OSError) as exc:
                report.add(name, f"unreadable ({exc})")
                continue
            report.files += 1
            if digest != entry.get("sha256") or size != entry.get("bytes"):
                report.add(name, "changed: its SHA-256 is not the one the manifest lists")

        # the runs: chains, step bindings, checkpoints, the export's own signed trailer
        derived: list[dict[str, str]] = []
        if RUNS in names:

            class _RunsVerifier(_Verifier):
                def run(self, number: int, obj: dict[str, Any]) -> None:
                    super().run(number, obj)
                    derived.extend(decision_rows(obj))

            verifier = _RunsVerifier(keys)
            try:
                with pack.open(RUNS) as handle:
                    for number, raw in _member_lines(handle):
                        verifier.line(number, raw)
                runs_report: Report = verifier.finish()
            except (zipfile.BadZipFile, OSError) as exc:
                report.add(RUNS, f"unreadable ({exc})")
                runs_report = Report()
            report.runs = runs_report.runs
            report.events = runs_report.events
            report.checkpoints = runs_report.checkpoints
            for p in runs_report.problems:
                where = f"line {p.line}"
                if p.run:
                    where += f" run {p.run}"
                if p.event is not None:
                    where += f" event {p.event}"
                report.add(RUNS, p.message, where)
            counted = (manifest.get("counts") or {}).get("runs")
            if counted is not None and counted != runs_report.runs:
                report.add(MANIFEST, f"counts {counted} runs, {RUNS} holds {runs_report.runs}")

        if DECISIONS in names:
            _decisions_compare(pack, derived, report)
    return report


def _decisions_compare(
    pack: zipfile.ZipFile, derived: list[dict[str, str]], report: PackReport
) -> None:
    """decisions.csv row by row against the decisions the runs' events record."""
    try:
        text = io.TextIOWrapper(pack.open(DECISIONS), encoding="utf-8", newline="")
        rows: Iterable[dict[str, str]] = csv.DictReader(text)
        expected = iter(derived)
        number = 1
        for number, row in enumerate(rows, start=2):  # row 1 is the header
            want = next(expected, None)
            if want is None:
                report.add(
                    DECISIONS,
                    "a decision no run's events record",
                    f"row {number} (run {row.get('run_id')} step {row.get('step_index')})",
                )
                return
            got = {c: row.get(c) or "" for c in DERIVED_COLUMNS}
            cells = {c: csv_text(v) for c, v in want.items()}
            if got != cells:
                differ = [c for c in DERIVED_COLUMNS if got[c] != cells[c]]
                report.add(
                    DECISIONS,
                    f"does not match the run's event {want['event_seq']} "
                    f"({', '.join(differ)}): a row was deleted, added or edited",
                    f"row {number} (run {want['run_id']} step {want['step_index']})",
                )
                return
            report.decisions += 1
        missing = next(expected, None)
        if missing is not None:
            report.add(
                DECISIONS,
                f"ends before the decision of run {missing['run_id']} step "
                f"{missing['step_index']} (event {missing['event_seq']}): rows were cut off",
                f"row {number + 1}",
            )
    except (UnicodeDecodeError, csv.Error, zipfile.BadZipFile) as exc:
        report.add(DECISIONS, f"not a readable CSV ({exc})")


def render_pack_report(report: PackReport, *, max_problems: int = 50) -> list[str]:
    lines = []
    if report.fingerprint:
        lines.append(
            f"signing key fingerprint (SHA-256): {report.fingerprint} (key id {report.key_id}, "
            f"{report.key_source}); compare it with the one the ledger's checkpoints page shows"
        )
    period = report.manifest.get("period") or {}
    if period:
        lines.append(
            f"pack of {period.get('from')} to {period.get('to')}, filters "
            f"{json.dumps(report.manifest.get('filters'), sort_keys=True)}, made by "
            f"{(report.manifest.get('generator') or {}).get('name')} "
            f"{(report.manifest.get('generator') or {}).get('version')}"
        )
    lines.extend(str(p) for p in report.problems[:max_problems])
    if len(report.problems) > max_problems:
        lines.append(f"... and {len(report.problems) - max_problems} more")
    lines.append(
        f"checked {report.files} files, {report.runs} runs, {report.events} events, "
        f"{report.checkpoints} checkpoints, {report.decisions} decisions"
    )
    lines.append("OK" if report.ok else f"FAILED: {len(report.problems)} problems")
    return lines
