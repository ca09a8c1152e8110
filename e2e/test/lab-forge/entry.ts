// The Lab kind as a bottle's forge sidecar loads it (bundled into one file).
import { labKind } from './kind';

export default labKind();
