// Send, receive, change visibility and delete through `tenure sqs` with the AWS SDK for JavaScript v3.
// Usage: node client.mjs ENDPOINT ACCESS_KEY_ID SECRET. Prints one JSON line with what it saw; exits 1 on a failure.
import {
  SQSClient, CreateQueueCommand, SendMessageCommand, SendMessageBatchCommand, ReceiveMessageCommand,
  ChangeMessageVisibilityCommand, DeleteMessageCommand, DeleteMessageBatchCommand, GetQueueAttributesCommand,
  QueueDoesNotExist, GetQueueUrlCommand,
} from "@aws-sdk/client-sqs";

const [endpoint, accessKeyId, secretAccessKey] = process.argv.slice(2);
const sqs = new SQSClient({ endpoint, region: "us-east-1", credentials: { accessKeyId, secretAccessKey }, maxAttempts: 1 });
const out = {};
const fail = (what) => { console.log(JSON.stringify({ ...out, error: what })); process.exit(1); };

const { QueueUrl } = await sqs.send(new CreateQueueCommand({ QueueName: "js-queue" }));
out.queueUrl = QueueUrl;
const sent = await sqs.send(new SendMessageCommand({
  QueueUrl, MessageBody: "from javascript ✓",
  MessageAttributes: { kind: { DataType: "String", StringValue: "js" }, bytes: { DataType: "Binary", BinaryValue: new Uint8Array([0, 1, 2]) } },
}));
out.md5OfBody = sent.MD5OfMessageBody;
out.md5OfAttributes = sent.MD5OfMessageAttributes;
const batch = await sqs.send(new SendMessageBatchCommand({ QueueUrl, Entries: [
  { Id: "b1", MessageBody: "batch one" }, { Id: "b2", MessageBody: "batch two" }] }));
out.batchSent = batch.Successful.length;

const first = await sqs.send(new ReceiveMessageCommand({
  QueueUrl, MaxNumberOfMessages: 10, WaitTimeSeconds: 1, MessageAttributeNames: ["All"],
  MessageSystemAttributeNames: ["ApproximateReceiveCount"] }));
out.received = first.Messages.map((m) => m.Body).sort();
const mine = first.Messages.find((m) => m.Body === "from javascript ✓");
out.attribute = mine.MessageAttributes.kind.StringValue;
out.binary = Array.from(mine.MessageAttributes.bytes.BinaryValue);
await sqs.send(new ChangeMessageVisibilityCommand({ QueueUrl, ReceiptHandle: mine.ReceiptHandle, VisibilityTimeout: 0 }));
const again = await sqs.send(new ReceiveMessageCommand({ QueueUrl, MaxNumberOfMessages: 1, WaitTimeSeconds: 2,
  MessageSystemAttributeNames: ["ApproximateReceiveCount"] }));
if (!again.Messages || again.Messages[0].Body !== "from javascript ✓") fail("visibility 0 did not release the message");
out.receiveCount = again.Messages[0].Attributes.ApproximateReceiveCount;
await sqs.send(new DeleteMessageCommand({ QueueUrl, ReceiptHandle: again.Messages[0].ReceiptHandle }));
const others = first.Messages.filter((m) => m !== mine);
const deleted = await sqs.send(new DeleteMessageBatchCommand({ QueueUrl,
  Entries: others.map((m, i) => ({ Id: `d${i}`, ReceiptHandle: m.ReceiptHandle })) }));
out.batchDeleted = deleted.Successful.length;
const attrs = await sqs.send(new GetQueueAttributesCommand({ QueueUrl, AttributeNames: ["All"] }));
out.left = Number(attrs.Attributes.ApproximateNumberOfMessages) + Number(attrs.Attributes.ApproximateNumberOfMessagesNotVisible);
try {
  await sqs.send(new GetQueueUrlCommand({ QueueName: "js-missing" }));
  fail("GetQueueUrl of a missing queue succeeded");
} catch (e) {
  out.missing = e instanceof QueueDoesNotExist ? "QueueDoesNotExist" : `${e.name}`;
}
console.log(JSON.stringify(out));
