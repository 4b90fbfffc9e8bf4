#!/bin/sh
# docker-compose: the auditor's role and databases (same as stack.sh's pg_up).
set -e
psql -v ON_ERROR_STOP=1 -U postgres <<SQL
CREATE ROLE auditor LOGIN CREATEDB PASSWORD '${APP_DB_PASSWORD}';
CREATE DATABASE auditor OWNER auditor;
CREATE DATABASE auditor_source OWNER auditor;
SQL
