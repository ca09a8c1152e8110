// Stands in, inside the `bb` bundle, for ssh2, which dockerode loads at start-up only
// to support an ssh:// DOCKER_HOST. The real ssh2 is loaded the first time a
// connection is made, from dockerode's own dependencies, so `bb` keeps ssh:// engines
// without paying ~100 ms on every command that never uses one.
'use strict';
const { createRequire } = require('node:module');

let ssh2;
function load() {
  if (!ssh2) {
    const fromDockerode = createRequire(require.resolve('dockerode/package.json'));
    ssh2 = createRequire(fromDockerode.resolve('docker-modem/package.json'))('ssh2');
  }
  return ssh2;
}

module.exports = {
  Client: function Client(...args) {
    return new (load().Client)(...args);
  },
};
