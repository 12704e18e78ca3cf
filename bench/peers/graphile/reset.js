// Installs graphile-worker's schema in the (freshly created) scratch database.
// Usage: node reset.js
const { runMigrations } = require("graphile-worker");
const { connectionString, logger } = require("./common");

runMigrations({ connectionString, logger }).catch((e) => {
  console.error(e);
  process.exit(1);
});
