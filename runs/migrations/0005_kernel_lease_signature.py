"""ledger_lease takes the tool side's answers for its recovery rules (p_answers, p_lookup_tools):
a new signature is a new function, so the old one is dropped before the snapshot that follows
installs the new (docs/architecture.md, "Changing the kernel")."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("runs", "0004_trace_context")]

    operations = [
        migrations.RunSQL(
            "DROP FUNCTION IF EXISTS ledger_lease("
            "uuid, text, text, integer, timestamp with time zone, text, text)",
            migrations.RunSQL.noop,
        )
    ]
