"""`tenure sqs`: an SQS-compatible HTTP API over tenure's leases (issue 25, docs/sqs.md).

A message is a job of the tenure queue named as the SQS queue; ReceiveMessage is a claim (the
visibility timeout is the lease), the receipt handle an HMAC-sealed (job id, lock token), and
DeleteMessage a fenced completion. Both wire protocols: AWS JSON 1.0 and the query protocol.

Modules: ``errors`` (SQS error shapes), ``wire`` (MD5 digests, receipt handles), ``auth``
(credentials file, SigV4), ``params`` (validation), ``queues`` and ``messages`` (the actions),
``query`` (the form/XML protocol), ``app`` (the ASGI app and its config).
"""
