import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("pipelines", "0003_binding_ledger_topics"),
    ]

    operations = [
        migrations.CreateModel(
            name="TopicIncarnation",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("topic", models.CharField(max_length=249)),
                ("topic_id", models.CharField(max_length=64)),
                ("first_seen", models.DateTimeField()),
                ("last_seen", models.DateTimeField()),
                (
                    "cluster",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="topic_incarnations",
                        to="pipelines.cluster",
                    ),
                ),
            ],
            options={
                "ordering": ["cluster", "topic", "first_seen"],
                "constraints": [
                    models.UniqueConstraint(fields=("cluster", "topic", "topic_id"), name="topic_incarnation_unique")
                ],
            },
        ),
    ]
