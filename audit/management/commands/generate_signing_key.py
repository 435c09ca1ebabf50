from argparse import ArgumentParser
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from audit.signing import private_key_generate, private_key_parse, public_key_text


class Command(BaseCommand):
    help = (
        "Generate an Ed25519 signing key for checkpoints and exports. Prints the private key "
        "(set it as AUDIT_SIGNING_KEY) and the public key (give it to auditors for "
        "verify_export). With --write FILE the private key goes to a new 0600 file instead."
    )
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument(
            "--write", metavar="FILE", help="write the private key to FILE (must not exist)"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        private = private_key_generate()
        public = public_key_text(private_key_parse(private).public_key())
        if options["write"]:
            path = Path(options["write"])
            if path.exists():
                raise CommandError(f"{path} exists; refusing to overwrite a signing key.")
            path.touch(mode=0o600)
            path.write_text(private + "\n")
            self.stdout.write(f"private key written to {path}")
        else:
            self.stdout.write(f"AUDIT_SIGNING_KEY={private}")
        self.stdout.write(f"public key: {public}")
