//! On-demand prices through the Pricing API (moto's shim answers GetProducts with AWS's item
//! shape, beside Windows, RHEL, dedicated and unused-reservation items the filters must
//! leave out), and the embedded table when the API fails.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::collections::BTreeMap;
use std::sync::Arc;

use karpenter_aws::config::Clients;
use karpenter_aws::pricing::PricingApi;
use karpenter_aws::provider::{AwsCloud, PriceSource};
use karpenter_aws::testing::{Fixture, Moto, REGION, connection, settings};
use karpenter_core::model::CapacityType;
use karpenter_core::ports::CloudProvider;

const CLUSTER: &str = "pricing-test";

async fn provider(moto: &Moto) -> Arc<AwsCloud> {
    let clients = Clients::connect(&connection(&moto.endpoint())).await;
    let fixture = Fixture::create(&clients, CLUSTER).await.expect("fixture");
    let cloud = AwsCloud::new(
        clients.ec2.clone(),
        clients.ssm.clone(),
        clients.iam.clone(),
        settings(CLUSTER),
    )
    .unwrap()
    .with_pricing(PricingApi::new(clients.pricing.clone(), REGION));
    cloud.set_node_class(fixture.node_class("default"));
    Arc::new(cloud)
}

async fn on_demand_price(cloud: &AwsCloud, name: &str) -> f64 {
    let types = cloud.instance_types("default").await.unwrap();
    let it = types.iter().find(|t| t.name == name).expect(name);
    let prices: Vec<f64> = it
        .offerings
        .iter()
        .filter(|o| o.capacity_type == CapacityType::OnDemand)
        .map(|o| o.price)
        .collect();
    assert!(!prices.is_empty(), "{name} has on-demand offerings");
    assert!(prices.iter().all(|p| *p == prices[0]), "{prices:?}");
    prices[0]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_demand_offerings_are_priced_by_the_pricing_api_and_by_the_table_when_it_fails() {
    let _turn = Moto::exclusive().await;
    let moto = Moto::shared();
    moto.reset();

    // The API's list prices, with a region-specific answer the table does not hold.
    let answer: BTreeMap<String, f64> = [
        ("m5.large", 0.1234),
        ("m5.metal", 5.0),
        ("c5.large", 0.0888),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    moto.set_prices(REGION, Some(&answer));
    let cloud = provider(moto).await;
    // Until the API answers, the table's prices for the region are in use.
    assert_eq!(cloud.price_source(), PriceSource::Table);
    assert_eq!(on_demand_price(&cloud, "m5.large").await, 0.096);
    assert_eq!(
        cloud.refresh_on_demand_prices().await.unwrap(),
        PriceSource::PricingApi
    );
    assert_eq!(on_demand_price(&cloud, "m5.large").await, 0.1234);
    assert_eq!(on_demand_price(&cloud, "c5.large").await, 0.0888);
    // Bare metal comes from the dedicated-tenancy query.
    assert_eq!(on_demand_price(&cloud, "m5.metal").await, 5.0);
    // A type the answer leaves out keeps the price it had, as upstream's merge keeps it.
    assert_eq!(on_demand_price(&cloud, "r5.large").await, 0.126);

    // A failing refresh keeps the prices in use.
    moto.fail_pricing(Some("AccessDeniedException"));
    let error = cloud.refresh_on_demand_prices().await.unwrap_err();
    assert!(
        error.to_string().contains("AccessDeniedException"),
        "{error}"
    );
    assert_eq!(on_demand_price(&cloud, "m5.large").await, 0.1234);
    assert_eq!(cloud.price_source(), PriceSource::PricingApi);

    // A provider the API never answered keeps the embedded table for its region.
    let fresh = provider(moto).await;
    assert!(fresh.refresh_on_demand_prices().await.is_err());
    assert_eq!(on_demand_price(&fresh, "m5.large").await, 0.096);
    assert_eq!(fresh.price_source(), PriceSource::Table);

    // The full answer (the table's us-west-2 list prices) is read across pages.
    moto.fail_pricing(None);
    moto.set_prices(REGION, None);
    let full = provider(moto).await;
    full.refresh_on_demand_prices().await.unwrap();
    assert_eq!(full.price_source(), PriceSource::PricingApi);
    assert_eq!(on_demand_price(&full, "m5.large").await, 0.096);
    assert_eq!(on_demand_price(&full, "c6i.2xlarge").await, 0.34);
    assert!(full.instance_types("default").await.unwrap().len() > 300);
}
