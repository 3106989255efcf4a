-- outbox-relay setup: the outbox table, its publication, the replication slot
-- and a least-privilege role for the relay. Run once as a superuser (or the
-- table owner with CREATE on the database), e.g.
--   psql "$DATABASE_URL" -v relay_password="'change-me'" -f sql/outbox.sql
--
-- The columns match Debezium's outbox event router, so an existing outbox
-- table works unchanged; names are configurable in relay.toml ([postgres.columns]).
-- Rows may be deleted in the same transaction that inserted them: the WAL still
-- carries the INSERT and the relay still publishes it, while the table stays small.

CREATE TABLE IF NOT EXISTS public.outbox (
    id                 uuid        PRIMARY KEY,
    aggregatetype      text        NOT NULL,  -- routes to topic outbox.event.<aggregatetype>
    aggregateid        text        NOT NULL,  -- Kafka key: same aggregate, same partition, commit order
    type               text        NOT NULL,  -- CloudEvents type
    payload            jsonb       NOT NULL,  -- CloudEvents data
    "timestamp"        timestamptz NOT NULL DEFAULT now(),
    tracingspancontext text                   -- W3C traceparent, optional
);

-- Only INSERTs are published: updates, deletes and truncates of the outbox
-- are housekeeping, not events.
DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_publication WHERE pubname = 'outbox_pub') THEN
        CREATE PUBLICATION outbox_pub FOR TABLE public.outbox WITH (publish = 'insert');
    END IF;
END $$;

-- The slot is created here, never by `outbox-relay run`: a relay that created
-- its own slot after losing one would silently skip everything in between.
SELECT pg_create_logical_replication_slot('outbox_relay', 'pgoutput')
WHERE NOT EXISTS (SELECT FROM pg_replication_slots WHERE slot_name = 'outbox_relay');

-- The parking table (sql/outbox_parked.sql, beside this file): where an
-- aggregate's later events wait behind its dead letter (after_dead_letter =
-- "park", the default), named as the relay names it for public.outbox.
\ir outbox_parked.sql

-- Least privilege: log in, stream changes, read the outbox, park events.
-- Nothing else.
DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'outbox_relay') THEN
        CREATE ROLE outbox_relay LOGIN REPLICATION;
    END IF;
END $$;
\if :{?relay_password}
ALTER ROLE outbox_relay PASSWORD :relay_password;
\endif
GRANT USAGE ON SCHEMA public TO outbox_relay;
GRANT SELECT ON public.outbox TO outbox_relay;
GRANT SELECT, INSERT, UPDATE, DELETE ON public.outbox_parked TO outbox_relay;
