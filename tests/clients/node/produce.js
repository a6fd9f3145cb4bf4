// Drives kafkajs against a gateway: create a topic, produce keyed messages with
// headers under one codec, and read offsets back through the admin client.
// Prints one JSON line with what the broker acknowledged.
// Usage: node produce.js <bootstrap> <topic> <codec: none|gzip|snappy> <count>
const { Kafka, CompressionTypes, CompressionCodecs, logLevel } = require('kafkajs')
const SnappyCodec = require('kafkajs-snappy')
CompressionCodecs[CompressionTypes.Snappy] = SnappyCodec

const [bootstrap, topic, codecName, countText] = process.argv.slice(2)
const count = parseInt(countText, 10)
const codec = { none: CompressionTypes.None, gzip: CompressionTypes.GZIP, snappy: CompressionTypes.Snappy }[codecName]
const BASE_TS = 1700000000000

async function main () {
  // SASL_SSL with SCRAM-SHA-512 when KAFSCALE_SASL_USER is set (the security tests).
  const security = process.env.KAFSCALE_SASL_USER
    ? { ssl: { ca: [require('fs').readFileSync(process.env.KAFSCALE_CA_FILE)] },
        sasl: { mechanism: 'scram-sha-512', username: process.env.KAFSCALE_SASL_USER,
          password: process.env.KAFSCALE_SASL_PASSWORD } }
    : {}
  const kafka = new Kafka({ clientId: 'kafscale-e2e', brokers: [bootstrap], logLevel: logLevel.ERROR, ...security })
  const admin = kafka.admin()
  await admin.connect()
  await admin.createTopics({ topics: [{ topic, numPartitions: 2 }], waitForLeaders: true })
  const producer = kafka.producer({ allowAutoTopicCreation: false })
  await producer.connect()
  const acks = []
  for (let start = 0; start < count; start += 25) {
    const messages = []
    for (let i = start; i < Math.min(start + 25, count); i++) {
      messages.push({ key: `k${i}`, value: `value ${i}`, partition: i % 2,
        headers: { n: `${i}` }, timestamp: `${BASE_TS + i}` })
    }
    const result = await producer.send({ topic, acks: -1, compression: codec, messages })
    acks.push(...result.map(r => ({ partition: r.partition, baseOffset: r.baseOffset, error: r.errorCode })))
  }
  await producer.disconnect()
  const offsets = await admin.fetchTopicOffsets(topic)
  const byTime = await admin.fetchTopicOffsetsByTimestamp(topic, BASE_TS + 50)
  const metadata = await admin.fetchTopicMetadata({ topics: [topic] })
  await admin.disconnect()
  console.log(JSON.stringify({ acks, offsets, byTime, partitions: metadata.topics[0].partitions.length }))
}

main().catch(err => { console.error(err); process.exit(1) })
