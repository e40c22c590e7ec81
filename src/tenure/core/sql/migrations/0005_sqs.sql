-- 0005_sqs: the tables of `tenure sqs`, an SQS-compatible API over tenure's leases (issue 25).
-- Messages are jobs; these hold what SQS has and a job has not.

-- SQS queues of `tenure sqs` (issue 25): one row per SQS queue; its messages are the jobs of the
-- tenure queue of the same name. Attributes are SQS's own names and string values.
CREATE TABLE sqs_queues (
    name         text PRIMARY KEY,
    fifo         boolean     NOT NULL DEFAULT false,
    attributes   jsonb       NOT NULL DEFAULT '{}'::jsonb,
    tags         jsonb       NOT NULL DEFAULT '{}'::jsonb,
    purged_at    timestamptz,
    created_at   timestamptz NOT NULL DEFAULT now(),
    modified_at  timestamptz NOT NULL DEFAULT now()
);

-- A message's first receive (ApproximateFirstReceiveTimestamp); goes with its job.
CREATE TABLE sqs_receipts (
    job_id             bigint PRIMARY KEY REFERENCES jobs (id) ON DELETE CASCADE,
    first_received_at  timestamptz NOT NULL DEFAULT now()
);

-- FIFO deduplication: a MessageDeduplicationId is remembered for 5 minutes per queue.
CREATE TABLE sqs_dedup (
    queue_name  text        NOT NULL,
    dedup_id    text        NOT NULL,
    job_id      bigint      NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (queue_name, dedup_id)
);

-- The key of the receipt handles' HMAC, shared by every `tenure sqs` replica.
CREATE TABLE sqs_secrets (
    id          boolean     PRIMARY KEY DEFAULT true CHECK (id),
    hmac_key    bytea       NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);
