-- One PostgreSQL database for one herald shard, and the role herald's nodes
-- log in as. Run it as a superuser, once per shard (several shards may share a
-- server, each in a database of its own; the role is made once per server):
--
--   psql -v ON_ERROR_STOP=1 -v shard=herald_a -v role=herald -v password="$(openssl rand -hex 32)" \
--        -f deploy/postgres-shard.sql 'postgres://postgres@db-a.internal/postgres'
--
-- herald creates its tables itself, on the first start of a node against the
-- shard, as this role: the role owns the database and needs nothing more (no
-- superuser, no CREATEDB, no CREATEROLE). The nodes then name the shard:
-- --store 'a=postgres://herald:PASSWORD@db-a.internal/herald_a?sslmode=require&sslrootcert=/etc/herald/db-ca.pem'
-- (docs/operations.md, "Storage shards").
--
-- On the server, outside this file:
--   postgresql.conf  max_connections >= 9 per node per shard database on this
--                    server (8 for reads, 1 for the writer), plus your own;
--                    ssl = on with the server's certificate.
--   pg_hba.conf      hostssl <shard> <role> <nodes' network> scram-sha-256
--
-- crates/herald/tests/deploy.rs runs this file against a fresh PostgreSQL
-- and starts herald nodes as the role it makes.

\set ON_ERROR_STOP on

-- The role, unless an earlier shard on this server made it. The password is
-- stored hashed (scram-sha-256 is the default since PostgreSQL 14).
SELECT format('CREATE ROLE %I LOGIN PASSWORD %L', :'role', :'password')
WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = :'role') \gexec

-- The shard's database, owned by the role: herald's schema goes into its
-- `public` schema, which the database's owner may create in (PostgreSQL 15
-- took that right from everyone else).
SELECT format('CREATE DATABASE %I OWNER %I ENCODING %L TEMPLATE template0', :'shard', :'role', 'UTF8')
WHERE NOT EXISTS (SELECT FROM pg_database WHERE datname = :'shard') \gexec

-- Only its owner, the role (and superusers) may connect.
REVOKE ALL ON DATABASE :"shard" FROM PUBLIC;

-- herald acknowledges an event once its transaction commits: the commit must
-- be durable, so synchronous_commit stays on for herald's sessions whatever
-- the server's default is.
ALTER ROLE :"role" IN DATABASE :"shard" SET synchronous_commit = 'on';
-- A batch holds its chats' rows locked, and herald drops a batch after 5 s.
-- A node frozen inside one (a stopped VM) would block every other node's
-- writes to those chats; the server ends such a session after 30 s.
ALTER ROLE :"role" IN DATABASE :"shard" SET idle_in_transaction_session_timeout = '30s';
