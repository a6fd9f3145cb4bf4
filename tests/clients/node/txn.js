// Writes transactions with kafkajs to partition 0 of a topic: for each round, <count>
// records "<prefix>-commit-<round>-<i>" committed, then <count> records
// "<prefix>-abort-<round>-<i>" aborted. Prints {"ok": true} when done.
// Usage: node txn.js <bootstrap> <topic> <transactional id> <prefix> <rounds> <count>
const { Kafka, logLevel } = require('kafkajs')

const [bootstrap, topic, transactionalId, prefix, rounds, count] = process.argv.slice(2)

async function main () {
  const kafka = new Kafka({ clientId: 'kafscale-txn', brokers: [bootstrap], logLevel: logLevel.ERROR })
  const producer = kafka.producer({ transactionalId, idempotent: true, maxInFlightRequests: 1 })
  await producer.connect()
  for (let round = 0; round < Number(rounds); round++) {
    for (const outcome of ['commit', 'abort']) {
      const transaction = await producer.transaction()
      const messages = []
      for (let i = 0; i < Number(count); i++) messages.push({ value: `${prefix}-${outcome}-${round}-${i}`, partition: 0 })
      await transaction.send({ topic, messages })
      if (outcome === 'commit') await transaction.commit()
      else await transaction.abort()
    }
  }
  await producer.disconnect()
  console.log(JSON.stringify({ ok: true }))
}

main().catch(error => { console.error(error); process.exit(1) })
