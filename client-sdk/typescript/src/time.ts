import { timestampDate, type Timestamp } from "@bufbuild/protobuf/wkt";

/** A protobuf timestamp as a Date (undefined when unset). */
export function dateOf(t: Timestamp | undefined): Date | undefined {
  return t ? timestampDate(t) : undefined;
}
