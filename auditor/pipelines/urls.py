from django.urls import path

from auditor.pipelines import views

app_name = "pipelines"
urlpatterns = [path("", views.index, name="index")]
