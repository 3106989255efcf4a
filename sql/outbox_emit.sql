-- outbox-relay: the table-less outbox. Run on its own, once per database
-- (as the owner of the schema the services use), e.g.
--   psql "$DATABASE_URL" -f sql/outbox_emit.sql
--
-- A service calls, inside the transaction that writes its business rows,
--   SELECT outbox_emit('order', '42', 'OrderPlaced', '{"total": 12.5}'::jsonb);
-- instead of inserting an outbox row. The event is a transactional logical
-- decoding message (pg_logical_emit_message(true, 'outbox', ...)): it is in
-- the WAL only, so there is no table to bloat and nothing to clean up. It
-- commits or rolls back with the caller's transaction, and the relay (with
-- [postgres] source = "messages" or "both") publishes it in commit order,
-- like an inserted row, with the same CloudEvents envelope.
--
-- The message content is one JSON object:
--   {"id", "aggregatetype", "aggregateid", "type", "payload", "timestamp",
--    "traceparent", "tracestate"}
-- `id` is a new UUID (returned to the caller), `timestamp` the transaction's
-- start time (now()). `traceparent`/`tracestate` are the caller's W3C trace
-- context, when it has one; they become the CloudEvents distributed-tracing
-- extension. `prefix` must match the relay's postgres.message_prefix.
--
-- Nothing else is needed: the relay's slot and publication stay as they are
-- (pgoutput sends messages whatever the publication contains).

CREATE OR REPLACE FUNCTION public.outbox_emit(
    aggregatetype text,
    aggregateid   text,
    type          text,
    payload       jsonb,
    traceparent   text DEFAULT NULL,
    tracestate    text DEFAULT NULL,
    prefix        text DEFAULT 'outbox'
) RETURNS uuid
LANGUAGE plpgsql
VOLATILE
AS $$
DECLARE
    event_id uuid := gen_random_uuid();
BEGIN
    IF aggregatetype IS NULL OR aggregateid IS NULL OR type IS NULL OR payload IS NULL THEN
        RAISE EXCEPTION 'outbox_emit: aggregatetype, aggregateid, type and payload must not be null';
    END IF;
    -- true: transactional. The message is decoded at its transaction's
    -- commit, in WAL order with the transaction's row changes, and never
    -- when the transaction rolls back.
    PERFORM pg_logical_emit_message(
        true,
        prefix,
        json_build_object(
            'id', event_id,
            'aggregatetype', aggregatetype,
            'aggregateid', aggregateid,
            'type', type,
            'payload', payload,
            'timestamp', now(),
            'traceparent', traceparent,
            'tracestate', tracestate
        )::text
    );
    RETURN event_id;
END
$$;

COMMENT ON FUNCTION public.outbox_emit(text, text, text, jsonb, text, text, text) IS
    'Writes an outbox event as a transactional logical message (prefix ''outbox''), for outbox-relay with postgres.source = "messages" or "both"';
