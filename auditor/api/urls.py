from django.urls import path

from auditor.api import views
from auditor.api.dispatch import urlpatterns_for

app_name = "api"
urlpatterns = [
    path("tokens/", views.tokens, name="tokens"),
    path("tokens/<int:token_id>/revoke/", views.revoke, name="revoke-token"),
    *urlpatterns_for(),
]
