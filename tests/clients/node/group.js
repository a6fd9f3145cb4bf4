// Runs N kafkajs group consumers on one topic; once the group is Stable with all N
// members it produces COUNT messages over the topic's partitions, and stops when the
// members have read them between them (committing as they go). Prints one JSON line
// with who read what.
// Usage: node group.js <bootstrap> <topic> <group> <members> <count>
const { Kafka, logLevel } = require('kafkajs')

const [bootstrap, topic, groupId, membersText, countText] = process.argv.slice(2)
const members = parseInt(membersText, 10)
const count = parseInt(countText, 10)

async function main () {
  const kafka = new Kafka({ clientId: 'kafscale-e2e', brokers: [bootstrap], logLevel: logLevel.ERROR })
  const seen = []
  const consumers = []
  let done
  const finished = new Promise(resolve => { done = resolve })
  const started = Date.now()
  for (let m = 0; m < members; m++) {
    const consumer = kafka.consumer({ groupId, sessionTimeout: 10000, heartbeatInterval: 500, rebalanceTimeout: 10000 })
    await consumer.connect()
    await consumer.subscribe({ topic, fromBeginning: true })
    seen.push([])
    consumers.push(consumer)
    await consumer.run({
      autoCommit: true,
      eachMessage: async ({ partition, message }) => {
        seen[m].push({ partition, offset: Number(message.offset), value: message.value.toString() })
        if (seen.reduce((n, s) => n + s.length, 0) >= count) done()
      }
    })
  }
  const timer = setTimeout(() => done(), 60000)
  const admin = kafka.admin()
  await admin.connect()
  let description
  for (;;) {
    description = await admin.describeGroups([groupId])
    const group = description.groups[0]
    if (group.state === 'Stable' && group.members.length === members) break
    await new Promise(resolve => setTimeout(resolve, 100))
  }
  const stableAfter = (Date.now() - started) / 1000
  const producer = kafka.producer()
  await producer.connect()
  const metadata = await admin.fetchTopicMetadata({ topics: [topic] })
  const partitions = metadata.topics[0].partitions.length
  const messages = []
  for (let i = 0; i < count; i++) messages.push({ value: `${i}`, partition: i % partitions })
  await producer.send({ topic, acks: -1, messages })
  await producer.disconnect()
  await finished
  clearTimeout(timer)
  const seconds = (Date.now() - started) / 1000
  description = await admin.describeGroups([groupId])
  await admin.disconnect()
  for (const consumer of consumers) await consumer.disconnect()
  console.log(JSON.stringify({ seen, seconds, stableAfter, state: description.groups[0].state, members: description.groups[0].members.length }))
}

main().catch(err => { console.error(err); process.exit(1) })
