from pathlib import Path

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
]

# Concern apps mount themselves at /<app>/ once they have a urls module.
for app in ("canary", "demo", "reconcile", "stuck", "lint", "alerts", "reports", "api", "accounts", "metrics"):
    if (Path(__file__).parent / app / "urls.py").exists():
        urlpatterns.append(path(f"{app}/", include(f"auditor.{app}.urls")))
