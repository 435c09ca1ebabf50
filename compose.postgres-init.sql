-- compose.yaml's PostgreSQL runs this once, on its first start (an empty data volume), as the
-- cluster's superuser in the database `ledger`: the role the ledger connects as. An ordinary
-- role, as on a managed database (docs/deploy.md, "The database role"): not a superuser, no
-- BYPASSRLS, CREATEROLE or CREATEDB. It owns the database, so its migrations create the schema
-- (and the trusted extension pg_trgm) and it owns every table they make.
CREATE ROLE ledger LOGIN PASSWORD 'ledger' NOSUPERUSER NOBYPASSRLS NOCREATEROLE NOCREATEDB;
ALTER DATABASE ledger OWNER TO ledger;
