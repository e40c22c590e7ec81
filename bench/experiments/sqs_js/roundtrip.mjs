// One client process of bench/experiments/sqs_roundtrip.py --sdk js: the same round trips as its boto3 client
// (SendMessageBatch of 10, ReceiveMessage of 10, DeleteMessageBatch) with the AWS SDK for JavaScript v3.
// Usage: node roundtrip.mjs ENDPOINT QUEUE ROUNDS GO_FILE (ROUNDS 0: until GO_FILE.stop exists).
// Waits for GO_FILE, then prints one JSON line: {"done": messages deleted, "cpu": CPU seconds since GO_FILE},
// and exits once GO_FILE.stop exists.
import { existsSync } from "node:fs";
import {
  SQSClient, GetQueueUrlCommand, SendMessageBatchCommand, ReceiveMessageCommand, DeleteMessageBatchCommand,
} from "@aws-sdk/client-sqs";

const [endpoint, queue, roundsText, go] = process.argv.slice(2);
const rounds = Number(roundsText);
const sqs = new SQSClient({ endpoint, region: "us-east-1", credentials: { accessKeyId: "b", secretAccessKey: "b" },
                            maxAttempts: 1 });
const { QueueUrl } = await sqs.send(new GetQueueUrlCommand({ QueueName: queue }));
const fifo = queue.endsWith(".fifo");
while (!existsSync(go)) await new Promise((r) => setTimeout(r, 5));
const cpu0 = process.cpuUsage();
let done = 0;
for (let r = 1; rounds ? r <= rounds : !existsSync(`${go}.stop`); r++) {
  const Entries = Array.from({ length: 10 }, (_, i) => ({ Id: String(i), MessageBody: `m${r}-${i}`,
    ...(fifo ? { MessageGroupId: `g${i}`, MessageDeduplicationId: `${r}-${i}-${process.pid}-${Date.now()}` } : {}) }));
  await sqs.send(new SendMessageBatchCommand({ QueueUrl, Entries }));
  const got = (await sqs.send(new ReceiveMessageCommand({ QueueUrl, MaxNumberOfMessages: 10 }))).Messages ?? [];
  if (got.length) {
    const res = await sqs.send(new DeleteMessageBatchCommand({ QueueUrl, Entries: got.map((m, i) => (
      { Id: String(i), ReceiptHandle: m.ReceiptHandle })) }));
    done += (res.Successful ?? []).length;
  }
}
const cpu = process.cpuUsage(cpu0);
console.log(JSON.stringify({ done, cpu: (cpu.user + cpu.system) / 1e6 }));
while (!existsSync(`${go}.stop`)) await new Promise((r) => setTimeout(r, 5));  // the harness reads CPU first
