#!/usr/bin/env node
// Compiles Solidity sources with the npm `solc` package under the pinned settings and prints
// {compiler, settings, contracts: {Name: creation bytecode hex}} as JSON on stdout.
//
//   node chains/contracts/compile.js chains/contracts/Forwarder.sol > chains/contracts/Forwarder.json
//
// The pinned JSON files are what the binary embeds; `cargo test -p appliance-chains
// pinned_bytecode_matches_fresh_compile` recompiles and compares.
'use strict';
const fs = require('fs');
const path = require('path');
const solc = require('solc');

const SETTINGS = {
  optimizer: { enabled: true, runs: 200 },
  evmVersion: 'paris', // no PUSH0: runs on every EVM chain the registry lists
  metadata: { bytecodeHash: 'none' },
  outputSelection: { '*': { '*': ['evm.bytecode.object'] } },
};

const files = process.argv.slice(2);
if (files.length === 0) {
  console.error('usage: compile.js FILE.sol...');
  process.exit(2);
}
const sources = {};
for (const f of files) {
  sources[path.basename(f)] = { content: fs.readFileSync(f, 'utf8') };
}
const out = JSON.parse(solc.compile(JSON.stringify({ language: 'Solidity', sources, settings: SETTINGS })));
const errors = (out.errors || []).filter((e) => e.severity === 'error');
if (errors.length) {
  for (const e of errors) console.error(e.formattedMessage);
  process.exit(1);
}
const contracts = {};
for (const file of Object.keys(out.contracts).sort()) {
  for (const name of Object.keys(out.contracts[file]).sort()) {
    const obj = out.contracts[file][name].evm.bytecode.object;
    if (obj.length > 0) contracts[name] = obj;
  }
}
const settings = { ...SETTINGS };
delete settings.outputSelection;
process.stdout.write(JSON.stringify({ compiler: solc.version(), settings, contracts }, null, 2) + '\n');
