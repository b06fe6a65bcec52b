// @peculiar/x509, loaded for the development PKI.
//
// The library registers its algorithm providers through tsyringe, which
// refuses to load unless a Reflect metadata API exists (normally the
// `reflect-metadata` package, which this project does not depend on). Install
// a minimal one first, then load the library; hence the dynamic import.
installReflectMetadataShim();
export const x509 = await import('@peculiar/x509');

/**
 * Just enough of the reflect-metadata API for tsyringe (getMetadata,
 * getOwnMetadata, defineMetadata). @peculiar/x509's injectable classes carry
 * no design-time metadata, so lookups simply come back empty. Left alone if a
 * real polyfill is already installed.
 */
function installReflectMetadataShim(): void {
  type MetadataTarget = object;
  type MetadataReflect = typeof Reflect & {
    getMetadata?: unknown;
    getOwnMetadata?: unknown;
    defineMetadata?: unknown;
  };
  const reflect = Reflect as MetadataReflect;
  if (typeof reflect.getMetadata === 'function') return;

  const store = new WeakMap<MetadataTarget, Map<string | symbol | undefined, Map<unknown, unknown>>>();
  const ownMap = (target: MetadataTarget, property: string | symbol | undefined, create: boolean) => {
    let byProperty = store.get(target);
    if (!byProperty) {
      if (!create) return undefined;
      byProperty = new Map();
      store.set(target, byProperty);
    }
    let byKey = byProperty.get(property);
    if (!byKey && create) {
      byKey = new Map();
      byProperty.set(property, byKey);
    }
    return byKey;
  };
  const getOwnMetadata = (key: unknown, target: MetadataTarget, property?: string | symbol) =>
    ownMap(target, property, false)?.get(key);
  const getMetadata = (key: unknown, target: MetadataTarget, property?: string | symbol): unknown => {
    // Like reflect-metadata: inherited metadata is found along the prototype chain.
    for (let t: MetadataTarget | null = target; t; t = Object.getPrototypeOf(t)) {
      const byKey = ownMap(t, property, false);
      if (byKey?.has(key)) return byKey.get(key);
    }
    return undefined;
  };
  const defineMetadata = (key: unknown, value: unknown, target: MetadataTarget, property?: string | symbol) => {
    ownMap(target, property, true)!.set(key, value);
  };
  Object.assign(reflect, { getMetadata, getOwnMetadata, defineMetadata });
}
