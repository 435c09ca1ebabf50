"""ledger_step_answer becomes (code, details, created, step runs_step, run runs_run): the step's
answer is the row's own type, declared once. A composite type cannot be replaced in place, so
it is dropped here with the functions that use it (ledger_answer_fill and the three step
calls); the snapshot that follows creates the new type and the functions again."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("runs", "0006_kernel_snapshot")]

    operations = [
        migrations.RunSQL("DROP TYPE IF EXISTS ledger_step_answer CASCADE", migrations.RunSQL.noop)
    ]
