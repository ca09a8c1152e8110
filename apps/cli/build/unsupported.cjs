// Stands in, inside the `bb` bundle, for dockerode's BuildKit session transport (gRPC,
// protobuf). bb never uses it: images are built with the docker CLI. Loading it cost
// ~100 ms on every command; anything that reaches it fails with this message instead
// of misbehaving.
'use strict';
const fail = () => {
  throw new Error(
    'BuildKit sessions are not available in the bb binary: build images with the docker CLI',
  );
};
const stub = new Proxy(fail, {
  get: (_target, key) => (key === '__esModule' ? false : stub),
  apply: fail,
  construct: fail,
});
module.exports = stub;
