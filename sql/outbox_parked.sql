-- outbox-relay: the parking table.
--
-- When an event is dead-lettered under `after_dead_letter = "park"` (the
-- default), its aggregate (aggregatetype, aggregateid) is parked: a HEAD row
-- names the dead letter, and every later event of the aggregate is written
-- here (an EVENT row, the record exactly as it would have been sent) instead
-- of being delivered. An aggregate's queue is in commit order: by
-- (commit_lsn, position), never by id (a replay after a crash may write a
-- row that comes before rows already there). The slot confirms a transaction
-- only once its parked rows are committed here, so a crash loses none.
-- A later dead letter of a parked aggregate is a DEAD row in its queue: the
-- head the aggregate waits behind once the release reaches it. An earlier
-- one (a replay dead-letters an event the broker refused only after the
-- head was decided) becomes the HEAD, and the head it replaces a DEAD row.
-- A release sends a row only once the slot's confirmed position is past its
-- commit (a replay could still park it or send it), and starts only once it
-- is past the head's (every earlier event of the aggregate is then in Kafka).
--
-- `outbox-relay dead retry <head id>` sends the head again, then the queue in
-- order; `dead discard <head id>` sends the queue without the head. Either
-- holds the HEAD row's lock (FOR UPDATE) while it works, and the relay parks
-- under FOR SHARE of the same row, so no event slips between the last one
-- released and the aggregate going live. A released HEAD keeps its row
-- (released_at set) until the slot's position is past its commit: a replay of
-- the dead letter after a crash then does not park the aggregate again.
--
-- Created by `outbox-relay init` in the outbox table's schema; the relay's
-- role needs SELECT, INSERT, UPDATE, DELETE on it.
CREATE TABLE IF NOT EXISTS outbox_parked (
    id             bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    aggregatetype  text        NOT NULL,
    aggregateid    text        NOT NULL,
    event_id       text        NOT NULL,
    kind           text        NOT NULL CHECK (kind IN ('HEAD', 'EVENT', 'DEAD')),
    -- HEAD and DEAD: why the event was dead-lettered (no payload, no secret).
    reason         text,
    -- HEAD: when a release ended; the aggregate is live again.
    released_at    timestamptz,
    -- Where the event stands in the stream: a replay finds its row.
    shard          integer     NOT NULL,
    commit_lsn     pg_lsn      NOT NULL,
    position       bigint      NOT NULL,
    parked_at      timestamptz NOT NULL DEFAULT clock_timestamp(),
    -- EVENT: where it goes ('kafka', or the name of a webhook sink) and the
    -- record as it would have been sent: Kafka topic, key, headers, value
    -- (for a webhook sink: its HTTP headers and body).
    sink           text,
    topic          text,
    record_key     bytea,
    header_names   text[],
    header_values  bytea[],
    body           bytea,
    UNIQUE (shard, commit_lsn, position)
);

-- Each aggregate's queue, in commit order; the live heads.
CREATE INDEX IF NOT EXISTS outbox_parked_queue
    ON outbox_parked (aggregatetype, aggregateid, commit_lsn, position);
CREATE UNIQUE INDEX IF NOT EXISTS outbox_parked_heads
    ON outbox_parked (aggregatetype, aggregateid) WHERE kind = 'HEAD' AND released_at IS NULL;
