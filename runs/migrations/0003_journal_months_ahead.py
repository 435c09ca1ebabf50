"""The journal's month partitions from this month to three months ahead, made by the kernel's
ledger_journal_partitions_ensure (the retention job keeps making them; rows of a month without a
partition land in the DEFAULT one). Idempotent: months that exist are skipped."""

from django.db import migrations

MONTHS_AHEAD = """
SELECT ledger_journal_partitions_ensure(now()::date, (now() + interval '3 months')::date);
"""


class Migration(migrations.Migration):
    dependencies = [("runs", "0002_kernel_snapshot")]

    operations = [migrations.RunSQL(MONTHS_AHEAD, migrations.RunSQL.noop)]
