from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from auditor.status.views import overview

urlpatterns = [
    path("", overview, name="overview"),
    path("login/", auth_views.LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("admin/", admin.site.urls),
    path("status/", include("auditor.status.urls")),
    path("pipelines/", include("auditor.pipelines.urls")),
    path("canary/", include("auditor.canary.urls")),
    path("reconcile/", include("auditor.reconcile.urls")),
    path("stuck/", include("auditor.stuck.urls")),
    path("lint/", include("auditor.lint.urls")),
    path("alerts/", include("auditor.alerts.urls")),
    path("reports/", include("auditor.reports.urls")),
    path("api/", include("auditor.api.urls")),
    path("metrics/", include("auditor.metrics.urls")),
    path("lab/", include("auditor.lab.urls")),
]
