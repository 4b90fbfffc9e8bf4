from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("pipelines", "0002_config_file"),
    ]

    operations = [
        migrations.AddField(
            model_name="binding",
            name="producer_ledger_topic",
            field=models.CharField(blank=True, default="", max_length=249),
        ),
        migrations.AddField(
            model_name="binding",
            name="consumer_ledger_topic",
            field=models.CharField(blank=True, default="", max_length=249),
        ),
    ]
