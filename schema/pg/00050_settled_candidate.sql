-- PostgreSQL: alkstore.settled_candidate, one row holding a settled-horizon
-- candidate (head, next) that some store proved settled (a snapshot whose
-- xmin reached next), so that a store that has never read settles at once
-- up to it (docs/design/stream-horizon.md, mechanism step 6; attack55b F1).
-- A proven candidate says every transaction with an id below next has
-- ended, which stays true: every later snapshot's xmin is at least next,
-- and the tracker's rule accepts it unchanged. Without it, a fresh store
-- (a restarted consumer, a one-shot reader, `streams tail`) read nothing,
-- even events committed long before, while any write transaction ran
-- anywhere on the server. next is a full transaction id (xid8) as the
-- tracker holds it, a bigint. A store writes the row when a read settles
-- a head above what it last wrote, at most about once a second, off the
-- read's path (UPDATE ... WHERE head < the new head: it only moves
-- forward); every read statement returns the row with its snapshot.
-- Row (0, 0) is no candidate. A library older than 00050 never reads or
-- writes the table. A brand-new table: no lock on anything in use.
-- Every read statement reads the row, so a role that may read events gets
-- SELECT on it, and one that may update events UPDATE (the row is trusted
-- by every reader: only roles already trusted to write alkstore's tables
-- may write it), as granted on alkstore.events when this runs; default
-- privileges apply as to any new table.

-- +goose Up
CREATE TABLE IF NOT EXISTS alkstore.settled_candidate (
    one  boolean PRIMARY KEY DEFAULT true CHECK (one),
    head bigint NOT NULL,
    next bigint NOT NULL
);
INSERT INTO alkstore.settled_candidate (one, head, next) VALUES (true, 0, 0) ON CONFLICT (one) DO NOTHING;
-- +goose StatementBegin
DO $$
DECLARE
    r record;
BEGIN
    FOR r IN
        SELECT DISTINCT a.grantee, a.privilege_type
        FROM pg_class c, aclexplode(c.relacl) a
        WHERE c.oid = 'alkstore.events'::regclass AND a.grantee <> c.relowner
          AND a.privilege_type IN ('SELECT', 'UPDATE')
    LOOP
        IF r.grantee = 0 THEN
            EXECUTE format('GRANT %s ON alkstore.settled_candidate TO PUBLIC', r.privilege_type);
        ELSE
            -- regrole's text is already an identifier, quoted when it
            -- must be ("app-user", "AppUser"): %s, not %I, which quoted
            -- it again (attack56b F2).
            EXECUTE format('GRANT %s ON alkstore.settled_candidate TO %s', r.privilege_type, r.grantee::regrole);
        END IF;
    END LOOP;
END
$$;
-- +goose StatementEnd
COMMENT ON TABLE alkstore.settled_candidate IS 'One settled-horizon candidate some store proved settled: every event at or below head is committed or gone, every transaction id below next has ended (docs/design/stream-horizon.md, step 6)';
COMMENT ON COLUMN alkstore.settled_candidate.one IS 'Always true: the table holds one row';
COMMENT ON COLUMN alkstore.settled_candidate.head IS 'An offset at or below which every event is committed or permanently gone';
COMMENT ON COLUMN alkstore.settled_candidate.next IS 'A full transaction id (xid8) below which every transaction had ended when the candidate was proven';

-- +goose Down
DROP TABLE IF EXISTS alkstore.settled_candidate;
