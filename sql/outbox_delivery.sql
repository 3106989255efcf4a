-- outbox-relay: the delivery table of HTTP (webhook) routes.
--
-- An event of an HTTP route whose first attempts fail is moved here, in one
-- PostgreSQL transaction, before its WAL position may be confirmed: the slot
-- never waits on a slow endpoint. A retry worker claims due rows with
-- FOR UPDATE SKIP LOCKED, so several relays may share the table. While an
-- aggregate (route, aggregate_key) has a PENDING row, or a DEAD row whose
-- after_dead_letter is 'park', its later events are queued here behind it
-- instead of overtaking it.
--
-- status: PENDING (waiting for next_attempt_at), SENT (delivered by a retry),
-- DEAD (out of attempts or refused for good; `outbox-relay dead retry` turns
-- it back into PENDING, `dead discard` deletes it).
--
-- Created by `outbox-relay init` in the outbox table's schema; the relay's
-- role needs SELECT, INSERT, UPDATE, DELETE on it.
CREATE TABLE IF NOT EXISTS outbox_delivery (
    id              bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    event_id        text        NOT NULL UNIQUE,
    route           text        NOT NULL,
    aggregate_key   text        NOT NULL,
    status          text        NOT NULL DEFAULT 'PENDING'
                                CHECK (status IN ('PENDING', 'SENT', 'DEAD')),
    attempts        integer     NOT NULL DEFAULT 0,
    max_attempts    integer     NOT NULL,
    next_attempt_at timestamptz NOT NULL DEFAULT now(),
    last_error      text,
    last_status     integer,
    created_at      timestamptz NOT NULL DEFAULT now(),
    sent_at         timestamptz,
    -- the event as it is sent: its HTTP headers (ce-*, Idempotency-Key,
    -- content-type) as a JSON object of strings, and the exact body bytes.
    headers         jsonb       NOT NULL,
    body            bytea       NOT NULL,
    -- what this row does to its aggregate's later events once it is DEAD:
    -- the `after_dead_letter` of the event's route when the relay wrote it.
    -- 'park': they wait behind it until `dead retry` or `dead discard`;
    -- 'skip': they go on. The relay always writes it; the default is for
    -- rows written before the column existed, when a DEAD row held nothing.
    after_dead_letter text      NOT NULL DEFAULT 'skip'
                                CHECK (after_dead_letter IN ('park', 'skip'))
);

-- A table created before after_dead_letter existed gets it here (running
-- `outbox-relay init` again); its rows read 'skip', as they were written.
ALTER TABLE outbox_delivery ADD COLUMN IF NOT EXISTS after_dead_letter text NOT NULL
    DEFAULT 'skip' CHECK (after_dead_letter IN ('park', 'skip'));

-- The retry worker's scan: due rows, oldest first.
CREATE INDEX IF NOT EXISTS outbox_delivery_due
    ON outbox_delivery (next_attempt_at) WHERE status = 'PENDING';
-- Per-key order: the head of each aggregate's queue.
CREATE INDEX IF NOT EXISTS outbox_delivery_key
    ON outbox_delivery (route, aggregate_key, id) WHERE status = 'PENDING';
-- The DEAD rows of each aggregate: whether one holds its later events.
CREATE INDEX IF NOT EXISTS outbox_delivery_dead
    ON outbox_delivery (route, aggregate_key, id) WHERE status = 'DEAD';
