from django.urls import path

from auditor.stuck import views

app_name = "stuck"
urlpatterns = [
    path("", views.index, name="index"),
    path("api/items/", views.items_json, name="items"),
    path("diagnose/", views.diagnose_now, name="diagnose"),
    path("items/acknowledge/", views.items_acknowledge, name="items-acknowledge"),
    path("items/<int:item_id>/acknowledge/", views.item_acknowledge, name="item-acknowledge"),
    path("items/<int:item_id>/withdraw/", views.item_withdraw, name="item-withdraw"),
]
