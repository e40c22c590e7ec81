-- 0006_trace_context: the W3C traceparent of the enqueue that created a job (issue 26), so each
-- attempt's span is a child of the producer's. NULL when the producer traced nothing.
ALTER TABLE jobs ADD COLUMN trace_context text;
