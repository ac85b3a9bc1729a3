-- alk_jobs's rules on the state (a known state; running exactly when
-- holding a claim: a token and an expiry) as one CHECK that stops at its
-- first decisive term, and max_attempts DEFAULT 25 (the library's
-- DefaultMaxAttempts), so that a batch of jobs without options
-- (EnqueueJobsPlainCounted) leaves the column out. max_attempts keeps its
-- own CHECK, whose refusal names that rule, at no cost: one comparison
-- either way.
--
-- SQLite runs every CHECK on every row an INSERT writes, each with its own
-- jumps: for a pending job the three on the state and the claim cost four
-- VM instructions and two string comparisons (the state against
-- 'pending', then against 'running' for the claim rule). The one CHECK
-- tests claim_token IS NULL, then the state against 'pending': two
-- instructions and one comparison. A claim (an UPDATE to running) costs
-- five instructions and one comparison instead of seven and three. A
-- column an INSERT ... SELECT names costs every row two instructions (the
-- select's parameter, then its copy into the row); a default is loaded
-- once a statement. Callgrind, the whole process, a 1,000-job EnqueueMany
-- (the difference of 15 and 5 batches): 19.48k-19.53k -> 19.00k
-- instructions a job with the CHECK, -> 18.72k-18.76k with the default
-- too (the raw batch of bench/ 13.98k).
--
-- The CHECK accepts exactly the rows the three did (state is NOT NULL,
-- which SQLite tests before any CHECK), so every stored row
-- satisfies it; a column's default applies only to rows inserted later
-- (max_attempts is one of the table's first columns, in every stored
-- record). Both are changes SQLite documents as safe to make by editing
-- the definition ("Making Other Kinds Of Table Schema Changes",
-- lang_altertable.html, section 7), in O(1) as 00021 and 00035 did (see
-- 00021). The two edits are independent. The CHECK is merged only where
-- the definition holds 00035's text of all three rules (otherwise it is
-- left alone, as 00035 left a definition without 00006's text): it only
-- saves time. The default goes on the column definition every schema
-- since 00001 has spelled out, and the migration fails (naming this file)
-- unless the definition then has it, since the library's batch relies on
-- it: a max_attempts edited by hand is for its owner to bring back to
-- 00001's text first. Either way the whole migration or none of it.

-- +goose Up
PRAGMA writable_schema = ON;
UPDATE sqlite_schema SET sql = replace(sql,
    'max_attempts     INTEGER NOT NULL CHECK (max_attempts > 0),',
    'max_attempts     INTEGER NOT NULL DEFAULT 25 CHECK (max_attempts > 0),')
WHERE type = 'table' AND name = 'alk_jobs';
UPDATE sqlite_schema SET sql = replace(replace(sql,
    ' DEFAULT ''pending''
                     CHECK (state = ''pending'' OR state = ''running'' OR state = ''completed'' OR state = ''cancelled'' OR state = ''expired'' OR state = ''dead''),',
    ' DEFAULT ''pending'','),
    'CHECK ((claim_token IS NOT NULL AND claim_expires_at IS NOT NULL) OR state <> ''running''),
    CHECK (claim_token IS NULL OR claim_expires_at IS NULL OR state = ''running'')',
    'CHECK ((claim_token IS NULL OR claim_expires_at IS NULL) AND (state = ''pending'' OR state = ''completed'' OR state = ''cancelled'' OR state = ''expired'' OR state = ''dead'') OR (claim_token IS NOT NULL AND claim_expires_at IS NOT NULL AND state = ''running''))')
WHERE type = 'table' AND name = 'alk_jobs'
  AND instr(sql, ' DEFAULT ''pending''
                     CHECK (state = ''pending'' OR state = ''running'' OR state = ''completed'' OR state = ''cancelled'' OR state = ''expired'' OR state = ''dead''),') > 0
  AND instr(sql, 'CHECK ((claim_token IS NOT NULL AND claim_expires_at IS NOT NULL) OR state <> ''running''),
    CHECK (claim_token IS NULL OR claim_expires_at IS NULL OR state = ''running'')') > 0;
PRAGMA writable_schema = RESET;
CREATE TEMP TABLE alk_schema_00038 (edited INTEGER
    CONSTRAINT "alk_jobs.max_attempts is not as schema 00001 defined it: see schema/lite/00038_one_job_rules_check.sql" CHECK (edited));
INSERT INTO alk_schema_00038 SELECT count(*) FROM sqlite_schema
WHERE type = 'table' AND name = 'alk_jobs'
  AND instr(sql, 'max_attempts     INTEGER NOT NULL DEFAULT 25 CHECK (max_attempts > 0),') > 0;
DROP TABLE alk_schema_00038;
CREATE TABLE alk_schema_cookie (x);
DROP TABLE alk_schema_cookie;

-- +goose Down
PRAGMA writable_schema = ON;
UPDATE sqlite_schema SET sql = replace(sql,
    'max_attempts     INTEGER NOT NULL DEFAULT 25 CHECK (max_attempts > 0),',
    'max_attempts     INTEGER NOT NULL CHECK (max_attempts > 0),')
WHERE type = 'table' AND name = 'alk_jobs';
UPDATE sqlite_schema SET sql = replace(replace(sql,
    'state            TEXT    NOT NULL DEFAULT ''pending'',',
    'state            TEXT    NOT NULL DEFAULT ''pending''
                     CHECK (state = ''pending'' OR state = ''running'' OR state = ''completed'' OR state = ''cancelled'' OR state = ''expired'' OR state = ''dead''),'),
    'CHECK ((claim_token IS NULL OR claim_expires_at IS NULL) AND (state = ''pending'' OR state = ''completed'' OR state = ''cancelled'' OR state = ''expired'' OR state = ''dead'') OR (claim_token IS NOT NULL AND claim_expires_at IS NOT NULL AND state = ''running''))',
    'CHECK ((claim_token IS NOT NULL AND claim_expires_at IS NOT NULL) OR state <> ''running''),
    CHECK (claim_token IS NULL OR claim_expires_at IS NULL OR state = ''running'')')
WHERE type = 'table' AND name = 'alk_jobs'
  AND instr(sql, 'state            TEXT    NOT NULL DEFAULT ''pending'',') > 0
  AND instr(sql, 'CHECK ((claim_token IS NULL OR claim_expires_at IS NULL) AND (state = ''pending'' OR state = ''completed'' OR state = ''cancelled'' OR state = ''expired'' OR state = ''dead'') OR (claim_token IS NOT NULL AND claim_expires_at IS NOT NULL AND state = ''running''))') > 0;
PRAGMA writable_schema = RESET;
CREATE TABLE alk_schema_cookie (x);
DROP TABLE alk_schema_cookie;
