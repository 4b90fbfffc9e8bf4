# Image for web, worker, beat, canary and demo in docker-compose.yml.
FROM maven:3.9-eclipse-temurin-17 AS jars
COPY stack/maven /stack/maven
RUN cd /stack/maven/spark && mvn -q -B -s ../settings.xml dependency:copy-dependencies \
      -DoutputDirectory=/jars -DincludeScope=runtime

FROM python:3.11-slim-bookworm
RUN apt-get update && apt-get install -y --no-install-recommends openjdk-17-jre-headless procps \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY requirements.txt .
RUN pip install --no-cache-dir -r requirements.txt
COPY --from=jars /jars /app/.cache/spark/jars
COPY . .
# The probes' native produce() hot path: built with a compiler that does not stay in the image.
RUN apt-get update && apt-get install -y --no-install-recommends gcc libc6-dev \
    && python -m auditor.probes.build_native \
    && apt-get purge -y gcc libc6-dev && apt-get autoremove -y && rm -rf /var/lib/apt/lists/*
ENV SPARK_JARS_DIR=/app/.cache/spark/jars PYTHONUNBUFFERED=1
RUN DJANGO_SECRET_KEY=build DATABASE_URL=postgresql://x:x@localhost/x python manage.py collectstatic --noinput
EXPOSE 8000
CMD ["python", "-m", "daphne", "-b", "0.0.0.0", "-p", "8000", "auditor.asgi:application"]
