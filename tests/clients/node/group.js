// Runs N kafkajs group consumers on one topic until they have read COUNT messages
// between them, committing as they go; prints one JSON line with who read what.
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
  await finished
  clearTimeout(timer)
  const seconds = (Date.now() - started) / 1000
  const admin = kafka.admin()
  await admin.connect()
  const description = await admin.describeGroups([groupId])
  await admin.disconnect()
  for (const consumer of consumers) await consumer.disconnect()
  console.log(JSON.stringify({ seen, seconds, state: description.groups[0].state, members: description.groups[0].members.length }))
}

main().catch(err => { console.error(err); process.exit(1) })
