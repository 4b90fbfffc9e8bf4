from django.urls import path

from auditor.reconcile import views

app_name = "reconcile"
urlpatterns = [
    path("", views.runs, name="index"),
    path("runs/", views.runs, name="runs"),
    path("runs/run/", views.run_now, name="run-now"),
    path("findings/", views.findings, name="findings"),
    path("findings/acknowledge/", views.findings_acknowledge, name="findings-acknowledge"),
    path("findings/<int:finding_id>/", views.finding_detail, name="finding"),
    path("findings/<int:finding_id>/acknowledge/", views.finding_acknowledge, name="finding-acknowledge"),
    path("findings/<int:finding_id>/withdraw/", views.finding_withdraw, name="finding-withdraw"),
    path("keys/<slug:binding>/<path:key>/", views.key_page, name="key"),
]
