// Reads partition 0 of a topic with kafkajs from its start, in a consumer group (kafkajs
// consumers always join one), until nothing more comes for two seconds (a cleaned log's
// last offsets may hold nothing), and prints one JSON line:
// {"records": [[offset, key, value-or-null], ...]}. kafkajs reads committed records only
// (read_committed) unless the fourth argument is "uncommitted".
// Usage: node read.js <bootstrap> <topic> <group> [uncommitted]
const { Kafka, logLevel } = require('kafkajs')

const [bootstrap, topic, group, isolation] = process.argv.slice(2)

async function main () {
  const kafka = new Kafka({ clientId: 'kafscale-read', brokers: [bootstrap], logLevel: logLevel.ERROR })
  const records = []
  const consumer = kafka.consumer({ groupId: group, maxWaitTimeInMs: 200, readUncommitted: isolation === 'uncommitted' })
  await consumer.connect()
  await consumer.subscribe({ topic, fromBeginning: true })
  await new Promise((resolve, reject) => {
    const deadline = setTimeout(() => reject(new Error(`still reading after 120 s, ${records.length} records`)), 120000)
    let idle = null
    const quiet = () => {
      clearTimeout(idle)
      idle = setTimeout(() => { clearTimeout(deadline); resolve() }, 2000)
    }
    consumer.on(consumer.events.CRASH, ({ payload }) => reject(payload.error))
    consumer.run({
      eachBatch: async ({ batch }) => {
        for (const m of batch.messages) {
          records.push([Number(m.offset), m.key === null ? null : m.key.toString(),
            m.value === null ? null : m.value.toString()])
        }
        if (records.length) quiet()
      }
    }).catch(reject)
  })
  await consumer.disconnect()
  console.log(JSON.stringify({ records }))
}

main().catch(error => { console.error(error); process.exit(1) })
