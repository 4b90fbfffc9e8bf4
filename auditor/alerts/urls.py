from django.urls import path

from auditor.alerts import views

app_name = "alerts"
urlpatterns = [
    path("", views.index, name="index"),
    path("channels/new/", views.channel_edit, name="channel-new"),
    path("channels/<int:channel_id>/", views.channel_detail, name="channel"),
    path("channels/<int:channel_id>/edit/", views.channel_edit, name="channel-edit"),
    path("channels/<int:channel_id>/delete/", views.channel_delete, name="channel-delete"),
    path("channels/<int:channel_id>/test/", views.channel_send_test, name="channel-test"),
    path("alerts/<int:alert_id>/acknowledge/", views.alert_acknowledge, name="acknowledge"),
    path("acknowledgements/<int:ack_id>/withdraw/", views.acknowledgement_withdraw, name="withdraw"),
]
