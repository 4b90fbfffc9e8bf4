"""Settings of the auditor, read from the environment (``stack/stack.sh up`` writes .env)."""

from __future__ import annotations

from pathlib import Path

import plotly

from auditor.lib.env import (
    database_from_url,
    envbool,
    envchoice,
    envint,
    envlist,
    envsecret,
    envstr,
    load_env_file,
)

BASE_DIR = Path(__file__).resolve().parent.parent
# Settings come from the environment; a checkout's .env (written by `make up`) fills gaps.
load_env_file(BASE_DIR / ".env")

SECRET_KEY = envsecret("DJANGO_SECRET_KEY")
DEBUG = envbool("AUDITOR_DEBUG", False)
ALLOWED_HOSTS = envlist("AUDITOR_ALLOWED_HOSTS", ["127.0.0.1", "localhost"])
CSRF_TRUSTED_ORIGINS = envlist("AUDITOR_CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "channels",
    "django_celery_beat",
    # The auditor's apps, one per concern (the URLs each mounts: auditor/urls.py).
    "auditor.accounts",
    "auditor.pipelines",
    "auditor.status",
    "auditor.canary",
    "auditor.demo",
    "auditor.reconcile",
    "auditor.stuck",
    "auditor.lint",
    "auditor.alerts",
    "auditor.reports",
    "auditor.api",
    "auditor.metrics",
    "auditor.lab",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.auth.middleware.LoginRequiredMiddleware",
    "auditor.accounts.middleware.RoleRequiredMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "auditor.urls"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "auditor.lib.navigation.navigation",
            ],
        },
    }
]
ASGI_APPLICATION = "auditor.asgi.application"
WSGI_APPLICATION = None

DATABASES = {"default": database_from_url(envstr("DATABASE_URL"))}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "status:index"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "/static/"
STATIC_ROOT = BASE_DIR / "var" / "static"
STATIC_ROOT.mkdir(parents=True, exist_ok=True)  # WhiteNoise warns when it is missing
# plotly.js comes from the installed plotly package: no CDN, closed networks work.
STATICFILES_DIRS = [
    BASE_DIR / "static",
    ("vendor/plotly", Path(plotly.__file__).parent / "package_data"),
]
WHITENOISE_USE_FINDERS = True
WHITENOISE_AUTOREFRESH = DEBUG

SESSION_COOKIE_HTTPONLY = True
CSRF_COOKIE_HTTPONLY = False
X_FRAME_OPTIONS = "DENY"
SECURE_CONTENT_TYPE_NOSNIFF = True

REDIS_URL = envstr("REDIS_URL", "redis://127.0.0.1:6380/0")
CACHES = {
    "default": {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": REDIS_URL,
        # Several auditors (or test sessions) sharing one Redis keep their keys apart.
        "KEY_PREFIX": envstr("AUDITOR_CACHE_PREFIX", "auditor"),
    }
}
CHANNEL_GROUP_EXPIRY_S = envint("AUDITOR_CHANNEL_GROUP_EXPIRY_S", 86400)
CHANNEL_LAYERS = {
    "default": {
        "BACKEND": "channels_redis.core.RedisChannelLayer",
        "CONFIG": {
            "hosts": [REDIS_URL],
            "prefix": envstr("AUDITOR_CHANNEL_PREFIX", "auditor"),
            # a group member not added again within this long is dropped (channels_redis's
            # default, a day); an open socket joins its groups again every LIVE_GROUP_REFRESH_S
            "group_expiry": CHANNEL_GROUP_EXPIRY_S,
        },
    }
}

# How often an open live socket checks its user's access and joins its groups again; kept well
# inside the channel layer's group expiry, or a page left open that long stops getting events.
LIVE_GROUP_REFRESH_S = min(envint("AUDITOR_LIVE_GROUP_REFRESH_S", 3600), max(1, CHANNEL_GROUP_EXPIRY_S // 4))

CELERY_BROKER_URL = REDIS_URL
# A separate queue lets two checkouts (or test sessions) share one Redis.
CELERY_TASK_DEFAULT_QUEUE = envstr("AUDITOR_CELERY_QUEUE", "celery")
CELERY_RESULT_BACKEND = REDIS_URL
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TIMEZONE = "UTC"
CELERY_TASK_TIME_LIMIT = envint("AUDITOR_TASK_TIME_LIMIT", 3600)
CELERY_TASK_SOFT_TIME_LIMIT = CELERY_TASK_TIME_LIMIT - 60
CELERY_BEAT_SCHEDULER = "django_celery_beat.schedulers:DatabaseScheduler"
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# RECONCILE_RUNNER=resident sends reconciliations to the reconciler worker's queue.
CELERY_TASK_ROUTES = ("auditor.reconcile.conf.route_task",)

KAFKA_BOOTSTRAP_SERVERS = envstr("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092")
SPARK_MASTER = envstr("SPARK_MASTER", "local[*]")
# How the worker runs reconciliations (auditor/reconcile/conf.py runner()).
RECONCILE_RUNNER = envchoice("RECONCILE_RUNNER", ("submit", "resident"), "submit")
SPARK_JARS_DIR = Path(envstr("SPARK_JARS_DIR", str(BASE_DIR / ".cache" / "spark" / "jars")))
STATUS_REFRESH_SECONDS = envint("AUDITOR_STATUS_REFRESH_SECONDS", 5)

# Webhooks: private/loopback destinations are refused unless allowed (SSRF guard).
AUDITOR_WEBHOOK_ALLOW_PRIVATE = envbool("AUDITOR_WEBHOOK_ALLOW_PRIVATE", False)
AUDITOR_WEBHOOK_RATE_LIMIT_PER_MINUTE = envint("AUDITOR_WEBHOOK_RATE_LIMIT_PER_MINUTE", 20)
AUDITOR_WEBHOOK_MAX_ATTEMPTS = envint("AUDITOR_WEBHOOK_MAX_ATTEMPTS", 4)
AUDITOR_WEBHOOK_BACKOFF_SECONDS = envint("AUDITOR_WEBHOOK_BACKOFF_SECONDS", 2)
AUDITOR_WEBHOOK_TIMEOUT_SECONDS = envint("AUDITOR_WEBHOOK_TIMEOUT_SECONDS", 10)
# Reports: e-mail goes out only when an SMTP host is configured.
EMAIL_HOST = envstr("EMAIL_HOST", "")
EMAIL_PORT = envint("EMAIL_PORT", 587)
EMAIL_HOST_USER = envstr("EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = envstr("EMAIL_HOST_PASSWORD", "")
EMAIL_USE_TLS = envbool("EMAIL_USE_TLS", True)
DEFAULT_FROM_EMAIL = envstr("DEFAULT_FROM_EMAIL", "auditor@localhost")
AUDITOR_BASE_URL = envstr("AUDITOR_BASE_URL", "http://127.0.0.1:8000")
AUDITOR_REPORT_MAX_CSV_ROWS = envint("AUDITOR_REPORT_MAX_CSV_ROWS", 100000)
AUDITOR_CANARY_LATENCY_ALERT_MS = envint("AUDITOR_CANARY_LATENCY_ALERT_MS", 5000)
AUDITOR_METRICS_CANARY_WINDOW_MINUTES = envint("AUDITOR_METRICS_CANARY_WINDOW_MINUTES", 15)
# /metrics' newest canary minute looks back this far: a canary stopped longer ago (removed on
# purpose) leaves the metric, so its CanaryStopped alert resolves (auditor/metrics/README.md).
AUDITOR_CANARY_STOPPED_HORIZON_S = envint("AUDITOR_CANARY_STOPPED_HORIZON_S", 7 * 24 * 3600)
# Canary minutes older than this are deleted by the canary as it stores new ones (0 keeps them
# all); never fewer than the horizon above, which /metrics reads. Reports of older periods then
# say the canary was not measured.
AUDITOR_CANARY_RETENTION_DAYS = envint("AUDITOR_CANARY_RETENTION_DAYS", 90)

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": envstr("AUDITOR_LOG_LEVEL", "INFO")},
    # py4j logs every connection it closes at INFO (hundreds when a Spark driver goes away)
    "loggers": {"kafka": {"level": "WARNING"}, "py4j": {"level": "WARNING"}},
}

# Static schedules; django-celery-beat copies them into its tables, where per-binding
# schedules (reconciliation, diagnosis, lint) are added and edited.
CELERY_BEAT_SCHEDULE = {
    "beat-heartbeat": {"task": "auditor.status.tasks.beat_heartbeat", "schedule": 5.0},
    "requeue-stale-webhooks": {"task": "auditor.alerts.tasks.requeue_stale_deliveries_task", "schedule": 300.0},
    "refresh-status": {"task": "auditor.status.tasks.refresh_status_task", "schedule": float(STATUS_REFRESH_SECONDS)},
}
