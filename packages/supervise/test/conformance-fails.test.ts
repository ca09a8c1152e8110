// Each deliberately broken build in fixtures/ fails the suites as fixtures/expected.json says.
import { describeFixtures } from '@bb/tooling/fixture-run';

await describeFixtures(new URL('fixtures/', import.meta.url));
