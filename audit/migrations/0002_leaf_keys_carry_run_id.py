"""A checkpoint leaf's keys carry run_id (issue 17: distributable by run_id with the journal).

The primary key becomes (id, run_id) in the database; a leaf's position is unique per
(checkpoint, position, run_id): checkpoint_create numbers one checkpoint's leaves itself.
"""

from django.db import migrations, models

PRIMARY_KEY = """
ALTER TABLE audit_checkpointleaf DROP CONSTRAINT audit_checkpointleaf_pkey;
ALTER TABLE audit_checkpointleaf ADD CONSTRAINT audit_checkpointleaf_pkey PRIMARY KEY (id, run_id);
"""

BACK = """
ALTER TABLE audit_checkpointleaf DROP CONSTRAINT audit_checkpointleaf_pkey;
ALTER TABLE audit_checkpointleaf ADD CONSTRAINT audit_checkpointleaf_pkey PRIMARY KEY (id);
"""


class Migration(migrations.Migration):
    dependencies = [("audit", "0001_initial")]

    operations = [
        migrations.RemoveConstraint(model_name="checkpointleaf", name="leaf_position_unique"),
        migrations.AddConstraint(
            model_name="checkpointleaf",
            constraint=models.UniqueConstraint(
                fields=("checkpoint", "position", "run_id"), name="leaf_position_unique"
            ),
        ),
        migrations.RunSQL(PRIMARY_KEY, BACK),
    ]
