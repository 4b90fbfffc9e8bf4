from django.urls import path

from auditor.lint import views

app_name = "lint"
urlpatterns = [
    path("", views.index, name="index"),
    path("api/results/", views.results_json, name="results"),
    path("scan/", views.scan_now, name="scan"),
    path("catalog/", views.catalog, name="catalog"),
    path("catalog.json", views.catalog_json, name="catalog-json"),
    path("catalog.csv", views.catalog_csv, name="catalog-csv"),
    path("paste/", views.paste, name="paste"),
]
