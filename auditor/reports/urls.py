from django.urls import path

from auditor.reports import views

app_name = "reports"
urlpatterns = [
    path("", views.index, name="index"),
    path("build/", views.build, name="build"),
    path("<int:report_id>/", views.report_page, name="report"),
    path("<int:report_id>/report.html", views.download_html, name="download-html"),
    path("<int:report_id>/findings.csv", views.download_csv, name="download-csv"),
    path("schedules/new/", views.schedule_edit, name="schedule-new"),
    path("schedules/<int:schedule_id>/edit/", views.schedule_edit, name="schedule-edit"),
    path("schedules/<int:schedule_id>/delete/", views.schedule_delete, name="schedule-delete"),
]
