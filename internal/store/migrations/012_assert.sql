-- harvest_assert raises code (a SQLSTATE; Harvest uses class HX, which
-- PostgreSQL does not) with message unless ok is true.
-- An apply batch that read nothing first sends its preconditions as its
-- first statements (store.Preconditions); one that fails aborts the
-- transaction, so the writes and the COMMIT queued after it in the same
-- round trip do nothing.
CREATE FUNCTION harvest_assert(ok boolean, code text, message text) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    IF ok IS NOT TRUE THEN
        RAISE EXCEPTION USING ERRCODE = code, MESSAGE = message;
    END IF;
    RETURN true;
END
$$;
