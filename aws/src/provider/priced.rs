//! The instance types a node class launches, with their offerings priced: on-demand from
//! the prices in use, spot from the catalog, reserved from the class's capacity
//! reservations ([`crate::reservations`]); cached until something they depend on changes.

use std::sync::Arc;

use karpenter_core::api::EC2NodeClass;
use karpenter_core::model::reservation::reserved_price;
use karpenter_core::model::{CapacityType, InstanceType, Offering, ReservedCapacity};
use karpenter_core::ports::{CloudError, OfferingKey};
use tokio::time::Instant;

use super::{AwsCloud, CatalogCache, PricedEntry, now_ms};
use crate::launch::kubelet_settings;
use crate::nodeclass::ResolvedNodeClass;
use crate::reservations::best_per_type_and_zone;

impl AwsCloud {
    /// What an offering of `instance_type` in `zone` costs: spot from the catalog's spot
    /// prices (on-demand until known), reserved as upstream prices reservations.
    pub(super) fn price(
        &self,
        catalog: &CatalogCache,
        instance_type: &str,
        zone: &str,
        capacity_type: CapacityType,
    ) -> f64 {
        let on_demand = self.on_demand().price(instance_type);
        match capacity_type {
            CapacityType::Spot => catalog
                .spot
                .get(&(instance_type.to_owned(), zone.to_owned()))
                .copied()
                .unwrap_or(on_demand),
            CapacityType::Reserved => reserved_price(on_demand),
            CapacityType::OnDemand => on_demand,
        }
    }

    /// The node class's instance types with priced offerings. Rebuilt only when the catalog,
    /// the node class's resolution, the insufficient-capacity cache or the use of its
    /// reservations changed.
    pub(super) async fn priced_types(
        &self,
        resolved: &Arc<ResolvedNodeClass>,
        node_class: &EC2NodeClass,
    ) -> Result<Arc<Vec<Arc<InstanceType>>>, CloudError> {
        let catalog = self.catalog().await?;
        let on_demand = self.on_demand();
        let now = Instant::now();
        let unavailable_generation = {
            let mut unavailable = self
                .unavailable
                .lock()
                .map_err(|_| CloudError::Other("unavailable-offerings cache poisoned".into()))?;
            unavailable.expire(now);
            unavailable.generation
        };
        let usage = self
            .reservation_use
            .lock()
            .map_err(|_| CloudError::Other("reservation-use cache poisoned".into()))?;
        let reservation_generation = usage.generation;
        if let Ok(cache) = self.priced.lock()
            && let Some(entry) = cache.get(&resolved.name)
            && Arc::ptr_eq(&entry.catalog, &catalog)
            && Arc::ptr_eq(&entry.on_demand, &on_demand)
            && Arc::ptr_eq(&entry.resolved, resolved)
            && entry.unavailable_generation == unavailable_generation
            && entry.reservation_generation == reservation_generation
        {
            return Ok(entry.types.clone());
        }
        let reserved = best_per_type_and_zone(&resolved.capacity_reservations, &usage, now_ms());
        let kubelet = kubelet_settings(
            &node_class.spec,
            resolved.family,
            self.settings.vm_memory_overhead_permille,
        );
        let unavailable = self
            .unavailable
            .lock()
            .map_err(|_| CloudError::Other("unavailable-offerings cache poisoned".into()))?;
        let mut out = Vec::new();
        for info in &catalog.infos {
            let Some(zones) = catalog.zones.get(&info.name) else {
                continue;
            };
            let Some(&od_price) = on_demand.prices.get(&info.name) else {
                continue;
            };
            let mut offerings = Vec::new();
            for zone in zones {
                if !resolved.subnet_per_zone.contains_key(zone) {
                    continue;
                }
                let mut push = |capacity_type: CapacityType, price: f64| {
                    let key = OfferingKey {
                        instance_type: info.name.clone(),
                        zone: zone.clone(),
                        capacity_type,
                    };
                    offerings.push(Offering::new(
                        zone.clone(),
                        capacity_type,
                        price,
                        !unavailable.is_unavailable(&key, now),
                    ));
                };
                if info.on_demand {
                    push(CapacityType::OnDemand, od_price);
                }
                if info.spot {
                    push(
                        CapacityType::Spot,
                        self.price(&catalog, &info.name, zone, CapacityType::Spot),
                    );
                }
                if let Some((reservation, remaining)) =
                    reserved.get(&(info.name.as_str(), zone.as_str()))
                {
                    let mut offering = Offering::reserved(
                        zone.clone(),
                        od_price,
                        ReservedCapacity {
                            reservation: reservation.reservation(),
                            remaining: *remaining,
                        },
                    );
                    offering.available &= !unavailable.is_unavailable(
                        &OfferingKey {
                            instance_type: info.name.clone(),
                            zone: zone.clone(),
                            capacity_type: CapacityType::Reserved,
                        },
                        now,
                    );
                    offerings.push(offering);
                }
            }
            if offerings.is_empty() {
                continue;
            }
            out.push(Arc::new(info.to_instance_type(
                &self.settings.region,
                &kubelet,
                offerings,
            )));
        }
        drop(unavailable);
        drop(reserved);
        drop(usage);
        let types = Arc::new(out);
        if let Ok(mut cache) = self.priced.lock() {
            cache.insert(
                resolved.name.clone(),
                PricedEntry {
                    catalog,
                    on_demand,
                    resolved: resolved.clone(),
                    unavailable_generation,
                    reservation_generation,
                    types: types.clone(),
                },
            );
        }
        Ok(types)
    }
}
